//! Envoy's rate limit service, v3: `ShouldRateLimit` over the [`Engine`],
//! with the types of the `envoy-types` crate.
//!
//! Answers are envoyproxy/ratelimit's by default (see [`crate::answers`]).
//! Beyond it: every algorithm and any period. A limit whose period is a
//! whole unit (second to year) reports that unit in `current_limit`; any
//! other period reports `UNKNOWN`, and with tollgate's counting the exact
//! numbers go in the `RateLimit-Policy` field of `response_headers_to_add`.

use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code as PbCode, DescriptorStatus as PbStatus, RateLimit as PbLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tollgate::Backend;
use tollgate_http::fields::{self, LimitItem, PolicyItem};
use tonic::{Request, Response, Status};

use crate::answers::{Answers, Counting};
use crate::engine::{
    CheckError, CheckRequest, CheckResponse, Code, DescriptorRequest, Engine, LimitOverride,
};
use crate::metrics;

const NS_PER_SEC: u64 = 1_000_000_000;

/// The gRPC service over a shared engine.
pub struct RlsService<B: Backend> {
    engine: Arc<Engine<B>>,
}

impl<B: Backend + 'static> RlsService<B> {
    /// The tonic server for `engine`, answering a request it cannot decode
    /// with `INVALID_ARGUMENT` (tonic's own answer is `INTERNAL`).
    pub fn server(engine: Arc<Engine<B>>) -> DecodeErrorsAreInvalid<RateLimitServiceServer<Self>> {
        DecodeErrorsAreInvalid(RateLimitServiceServer::new(RlsService { engine }))
    }
}

/// Rewrites tonic's answer to a body that is not the request message
/// (`INTERNAL`, "failed to decode Protobuf message") to `INVALID_ARGUMENT`:
/// the client sent bad input, the server did not fail.
#[derive(Clone)]
pub struct DecodeErrorsAreInvalid<S>(S);

impl<S: tonic::server::NamedService> tonic::server::NamedService for DecodeErrorsAreInvalid<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, Req, ResBody> tower::Service<Req> for DecodeErrorsAreInvalid<S>
where
    S: tower::Service<Req, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let answer = self.0.call(request);
        Box::pin(async move {
            let mut response = answer.await?;
            let headers = response.headers_mut();
            let internal = headers
                .get("grpc-status")
                .is_some_and(|s| s.as_bytes() == b"13");
            // grpc-message is percent-encoded on the wire.
            let undecodable = headers.get("grpc-message").is_some_and(|m| {
                let m = m.as_bytes();
                m.starts_with(b"failed%20to%20decode") || m.starts_with(b"failed to decode")
            });
            if internal && undecodable {
                headers.insert("grpc-status", http::HeaderValue::from_static("3"));
            }
            Ok(response)
        })
    }
}

/// The window of a unit of Envoy's API (`RateLimitResponse.RateLimit.Unit`,
/// whose numbers the request's `RateLimitUnit` shares); `None` for UNKNOWN.
fn unit_period(unit: i32) -> Option<u64> {
    let seconds = match Unit::try_from(unit).ok()? {
        Unit::Unknown => return None,
        Unit::Second => 1,
        Unit::Minute => 60,
        Unit::Hour => 3_600,
        Unit::Day => 86_400,
        Unit::Week => 604_800,
        Unit::Month => 2_592_000,
        Unit::Year => 31_536_000,
    };
    Some(seconds * NS_PER_SEC)
}

/// The engine's request for a gRPC (or `/json`) one; a limit override
/// with an unknown unit is `INVALID_ARGUMENT`.
pub(crate) fn to_check(request: RateLimitRequest) -> Result<CheckRequest, Status> {
    let descriptors = request
        .descriptors
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            let limit = match d.limit {
                None => None,
                Some(l) => Some(LimitOverride {
                    requests_per_unit: u64::from(l.requests_per_unit),
                    period_ns: unit_period(l.unit).ok_or_else(|| {
                        Status::invalid_argument(format!(
                            "descriptor {i}: the limit's unit {} is not a known unit",
                            l.unit
                        ))
                    })?,
                }),
            };
            Ok(DescriptorRequest {
                entries: d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
                hits: d.hits_addend.map(|h| h.value),
                negative: d.is_negative_hits,
                limit,
            })
        })
        .collect::<Result<_, Status>>()?;
    Ok(CheckRequest {
        domain: request.domain,
        hits: u64::from(request.hits_addend),
        descriptors,
    })
}

fn unit_of(period_ns: u64) -> Unit {
    match period_ns / NS_PER_SEC {
        _ if !period_ns.is_multiple_of(NS_PER_SEC) => Unit::Unknown,
        1 => Unit::Second,
        60 => Unit::Minute,
        3_600 => Unit::Hour,
        86_400 => Unit::Day,
        604_800 => Unit::Week,
        2_592_000 => Unit::Month,
        31_536_000 => Unit::Year,
        _ => Unit::Unknown,
    }
}

fn saturate_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn duration(ns: u64) -> PbDuration {
    PbDuration {
        seconds: (ns / NS_PER_SEC) as i64,
        nanos: (ns % NS_PER_SEC) as i32,
    }
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_string(),
        value,
        ..HeaderValue::default()
    }
}

/// The gRPC (and `/json`) answer for the engine's.
pub(crate) fn to_response(answer: CheckResponse, answers: &Answers) -> RateLimitResponse {
    let mut policies = Vec::new();
    let mut limits = Vec::new();
    let mut retry_after: Option<u64> = None;
    let statuses = answer
        .statuses
        .iter()
        .map(|s| {
            let mut status = PbStatus {
                code: match s.code {
                    Code::Ok => PbCode::Ok,
                    Code::OverLimit => PbCode::OverLimit,
                } as i32,
                limit_remaining: s.remaining.map_or(u32::MAX, saturate_u32),
                ..PbStatus::default()
            };
            if let Some(applied) = &s.limit {
                let (requests, period) = (applied.requests_per_unit, applied.period_ns);
                status.current_limit = Some(PbLimit {
                    name: applied.name.clone().unwrap_or_default(),
                    requests_per_unit: saturate_u32(requests),
                    unit: unit_of(period) as i32,
                });
                status.duration_until_reset = Some(duration(s.reset_after_ns));
                let label = applied.label();
                if answers.counting == Counting::Tollgate && fields::valid_name(label) {
                    policies.push((label, requests, period));
                    limits.push((label, s.remaining.unwrap_or(0), s.reset_after_ns));
                }
            }
            // A request that can never fit gets no `Retry-After` to wait
            // for in vain, as the HTTP layer answers it.
            let never_fits = s.retry_after_ns == Some(u64::MAX);
            if s.code == Code::OverLimit && answers.counting == Counting::Tollgate && !never_fits {
                let wait = s.retry_after_ns.unwrap_or(s.reset_after_ns);
                retry_after = Some(retry_after.map_or(wait, |w| w.max(wait)));
            }
            status
        })
        .collect();
    let mut headers = Vec::new();
    if !policies.is_empty() {
        let items: Vec<PolicyItem<'_>> = policies
            .iter()
            .map(|&(name, quota, period)| PolicyItem {
                name,
                quota,
                window: fields::secs_up(period),
                unit: None,
                partition: None,
            })
            .collect();
        headers.push(header("ratelimit-policy", fields::policy_field(&items)));
        let items: Vec<LimitItem<'_>> = limits
            .iter()
            .map(|&(name, remaining, reset)| LimitItem {
                name,
                remaining,
                reset: fields::secs_up(reset),
                partition: None,
            })
            .collect();
        headers.push(header("ratelimit", fields::limit_field(&items)));
    }
    if let Some(wait) = retry_after {
        headers.push(header(
            "retry-after",
            fields::retry_after_secs(wait).to_string(),
        ));
    }
    if let (Some(names), Some(i)) = (&answers.limit_headers, answer.closest) {
        let s = &answer.statuses[i];
        if let Some(applied) = &s.limit {
            let reset = s.reset_after_ns.div_ceil(NS_PER_SEC);
            headers.push(header(&names.limit, applied.requests_per_unit.to_string()));
            headers.push(header(
                &names.remaining,
                saturate_u32(s.remaining.unwrap_or(0)).to_string(),
            ));
            headers.push(header(&names.reset, reset.to_string()));
        }
    }
    let overall = match answer.overall {
        Code::Ok => PbCode::Ok,
        Code::OverLimit => PbCode::OverLimit,
    };
    RateLimitResponse {
        overall_code: overall as i32,
        statuses,
        response_headers_to_add: headers,
        ..RateLimitResponse::default()
    }
}

/// gRPC status for a check without a verdict.
fn to_status(err: CheckError) -> Status {
    match err {
        CheckError::Store { .. } => Status::unavailable(err.to_string()),
        _ => Status::invalid_argument(err.to_string()),
    }
}

#[tonic::async_trait]
impl<B: Backend + 'static> RateLimitService for RlsService<B> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = Instant::now();
        let check = to_check(request.into_inner())?;
        let answer = self.engine.check(&check).await;
        metrics::decision_time("grpc", started);
        let answers = self.engine.answers();
        answer
            .map(|a| Response::new(to_response(a, answers)))
            .map_err(to_status)
    }
}
