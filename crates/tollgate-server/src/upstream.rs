//! envoyproxy/ratelimit's own HTTP endpoints, on the HTTP API's port next
//! to tollgate's: `POST /json` and `GET /healthcheck`.
//!
//! `/json` takes a `RateLimitRequest` in the protobuf JSON mapping (field
//! names in `lowerCamelCase` or as in the `.proto`, 64-bit numbers as
//! numbers or strings, unknown fields refused) and answers the
//! `RateLimitResponse` of the gRPC API in the same mapping (fields at their
//! default left out, durations as `"1.500s"`): `200` when every descriptor
//! is under its limit, `429` when one is over, `400` with `Bad Request` for
//! a body or request that is not one. A limit failing closed on a store
//! error answers `503` with `Retry-After`, as `/v1/check` does
//! (envoyproxy/ratelimit answers `400` there).
//!
//! `/healthcheck` answers `200` `OK`, or `500` with no body when a check
//! configured in [`Health`] fails.
//!
//! ```text
//! curl -s localhost:8080/json -d '{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"ada"}]}]}'
//! {"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":100,"unit":"MINUTE"},"limitRemaining":99,"durationUntilReset":"42s"}]}
//! ```

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use envoy_types::pb::envoy::config::core::v3::HeaderValue as PbHeader;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry as PbEntry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code as PbCode;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::{Duration as PbDuration, UInt64Value};
use serde::Deserialize;
use serde_json::{Map, Value};
use tollgate::Backend;

use crate::api::{self, ApiToken, MAX_CHECK_BODY};
use crate::engine::{CheckError, Engine};
use crate::{grpc, metrics};

/// What `/healthcheck` checks beyond the process answering
/// (envoyproxy/ratelimit's optional health components).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Health {
    /// Unhealthy while the configuration defines no domain
    /// (`HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`).
    pub needs_a_domain: bool,
    /// Unhealthy while the store does not answer
    /// (`REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`).
    pub needs_the_store: bool,
}

struct Shared<B: Backend> {
    engine: Arc<Engine<B>>,
    health: Health,
}

/// The two routes over a shared engine.
pub fn router<B: Backend + 'static>(
    engine: Arc<Engine<B>>,
    health: Health,
    token: Option<ApiToken>,
) -> Router {
    let check = api::guard(Router::new().route("/json", any(json_check::<B>)), token);
    Router::new()
        .route("/healthcheck", any(healthcheck::<B>))
        .merge(check)
        .with_state(Arc::new(Shared { engine, health }))
}

async fn healthcheck<B: Backend + 'static>(State(shared): State<Arc<Shared<B>>>) -> Response {
    let no_domain = shared.health.needs_a_domain && shared.engine.config().domain_count() == 0;
    let no_store = shared.health.needs_the_store && api::store_ready(&shared.engine).await.is_err();
    if no_domain || no_store {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    plain(StatusCode::OK, "OK")
}

/// A text answer as Go's `net/http` writes it.
fn plain(status: StatusCode, text: &'static str) -> Response {
    let mut res = (status, text).into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    res
}

fn bad_request(why: impl std::fmt::Display) -> Response {
    tracing::debug!(error = %why, "/json: bad request");
    plain(StatusCode::BAD_REQUEST, "Bad Request\n")
}

async fn json_check<B: Backend + 'static>(
    State(shared): State<Arc<Shared<B>>>,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    if body.len() > MAX_CHECK_BODY {
        return plain(StatusCode::PAYLOAD_TOO_LARGE, "Request Entity Too Large\n");
    }
    let request: JsonRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => return bad_request(e),
    };
    let request = match request.into_proto() {
        Ok(request) => request,
        Err(e) => return bad_request(e),
    };
    let request = match grpc::to_check(request) {
        Ok(request) => request,
        Err(status) => return bad_request(status.message()),
    };
    let answer = shared.engine.check(&request).await;
    metrics::decision_time("http", started);
    match answer {
        Ok(answer) => respond(&grpc::to_response(answer, shared.engine.answers())),
        Err(e @ CheckError::Store { .. }) => api::store_unavailable(e.to_string()),
        Err(e) => bad_request(e),
    }
}

fn respond(response: &RateLimitResponse) -> Response {
    let status = match PbCode::try_from(response.overall_code) {
        Ok(PbCode::Ok) => StatusCode::OK,
        Ok(PbCode::OverLimit) => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let mut res = (status, response_json(response).to_string()).into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

/// `RateLimitResponse` in the protobuf JSON mapping.
fn response_json(response: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    if let Ok(code) = PbCode::try_from(response.overall_code) {
        if code != PbCode::Unknown {
            out.insert("overallCode".into(), code.as_str_name().into());
        }
    }
    let statuses: Vec<Value> = response
        .statuses
        .iter()
        .map(|s| {
            let mut status = Map::new();
            if let Ok(code) = PbCode::try_from(s.code) {
                if code != PbCode::Unknown {
                    status.insert("code".into(), code.as_str_name().into());
                }
            }
            if let Some(limit) = &s.current_limit {
                let mut l = Map::new();
                if !limit.name.is_empty() {
                    l.insert("name".into(), limit.name.clone().into());
                }
                if limit.requests_per_unit != 0 {
                    l.insert("requestsPerUnit".into(), limit.requests_per_unit.into());
                }
                if let Ok(unit) = Unit::try_from(limit.unit) {
                    if unit != Unit::Unknown {
                        l.insert("unit".into(), unit.as_str_name().into());
                    }
                }
                status.insert("currentLimit".into(), l.into());
            }
            if s.limit_remaining != 0 {
                status.insert("limitRemaining".into(), s.limit_remaining.into());
            }
            if let Some(d) = &s.duration_until_reset {
                status.insert("durationUntilReset".into(), duration_json(d).into());
            }
            status.into()
        })
        .collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), statuses.into());
    }
    for (name, headers) in [
        ("responseHeadersToAdd", &response.response_headers_to_add),
        ("requestHeadersToAdd", &response.request_headers_to_add),
    ] {
        if !headers.is_empty() {
            out.insert(name.into(), headers.iter().map(header_json).collect());
        }
    }
    out.into()
}

fn header_json(h: &PbHeader) -> Value {
    let mut out = Map::new();
    out.insert("key".into(), h.key.clone().into());
    if !h.value.is_empty() {
        out.insert("value".into(), h.value.clone().into());
    }
    out.into()
}

/// `"3s"`, `"1.500s"`, `"0.000000250s"`: seconds with 0, 3, 6 or 9
/// decimals, as the mapping writes a `Duration`.
fn duration_json(d: &PbDuration) -> String {
    let nanos = d.nanos.unsigned_abs();
    let fraction = if nanos == 0 {
        String::new()
    } else if nanos.is_multiple_of(1_000_000) {
        format!(".{:03}", nanos / 1_000_000)
    } else if nanos.is_multiple_of(1_000) {
        format!(".{:06}", nanos / 1_000)
    } else {
        format!(".{nanos:09}")
    };
    format!("{}{fraction}s", d.seconds)
}

/// A number of the mapping: JSON number or decimal string.
#[derive(Deserialize)]
#[serde(untagged)]
enum Number {
    Int(u64),
    Text(String),
}

impl Number {
    fn get(&self) -> Result<u64, String> {
        match self {
            Number::Int(n) => Ok(*n),
            Number::Text(s) => s.parse().map_err(|_| format!("`{s}` is not a number")),
        }
    }

    fn get_u32(&self) -> Result<u32, String> {
        let n = self.get()?;
        u32::try_from(n).map_err(|_| format!("{n} is over a 32-bit number"))
    }
}

/// An enum of the mapping: its name or its number.
#[derive(Deserialize)]
#[serde(untagged)]
enum EnumValue {
    Int(i32),
    Name(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRequest {
    domain: Option<String>,
    descriptors: Option<Vec<JsonDescriptor>>,
    #[serde(alias = "hitsAddend")]
    hits_addend: Option<Number>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDescriptor {
    entries: Option<Vec<JsonEntry>>,
    limit: Option<JsonOverride>,
    #[serde(alias = "hitsAddend")]
    hits_addend: Option<Number>,
    #[serde(alias = "isNegativeHits")]
    is_negative_hits: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    key: Option<String>,
    value: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonOverride {
    #[serde(alias = "requestsPerUnit")]
    requests_per_unit: Option<Number>,
    unit: Option<EnumValue>,
}

impl JsonRequest {
    fn into_proto(self) -> Result<RateLimitRequest, String> {
        let descriptors = self
            .descriptors
            .unwrap_or_default()
            .into_iter()
            .map(JsonDescriptor::into_proto)
            .collect::<Result<_, _>>()?;
        Ok(RateLimitRequest {
            domain: self.domain.unwrap_or_default(),
            descriptors,
            hits_addend: self.hits_addend.map_or(Ok(0), |n| n.get_u32())?,
        })
    }
}

impl JsonDescriptor {
    fn into_proto(self) -> Result<RateLimitDescriptor, String> {
        let limit = match self.limit {
            None => None,
            Some(o) => Some(RateLimitOverride {
                requests_per_unit: o.requests_per_unit.map_or(Ok(0), |n| n.get_u32())?,
                unit: match o.unit {
                    None => 0,
                    Some(EnumValue::Int(n)) => n,
                    Some(EnumValue::Name(name)) => RateLimitUnit::from_str_name(&name)
                        .ok_or_else(|| format!("unknown unit `{name}`"))?
                        as i32,
                },
            }),
        };
        Ok(RateLimitDescriptor {
            entries: self
                .entries
                .unwrap_or_default()
                .into_iter()
                .map(|e| PbEntry {
                    key: e.key.unwrap_or_default(),
                    value: e.value.unwrap_or_default(),
                })
                .collect(),
            limit,
            hits_addend: self
                .hits_addend
                .map(|n| n.get().map(|value| UInt64Value { value }))
                .transpose()?,
            is_negative_hits: self.is_negative_hits.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_written_as_the_mapping_does() {
        let d = |seconds, nanos| duration_json(&PbDuration { seconds, nanos });
        assert_eq!(d(3, 0), "3s");
        assert_eq!(d(1, 500_000_000), "1.500s");
        assert_eq!(d(0, 250_000), "0.000250s");
        assert_eq!(d(0, 7), "0.000000007s");
    }

    #[test]
    fn both_field_spellings_and_string_numbers_are_read() {
        let a: JsonRequest = serde_json::from_str(
            r#"{"domain":"d","hitsAddend":"3","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits_addend":7,"limit":{"requestsPerUnit":5,"unit":"HOUR"}}]}"#,
        )
        .unwrap();
        let a = a.into_proto().unwrap();
        assert_eq!(a.hits_addend, 3);
        let d = &a.descriptors[0];
        assert_eq!(d.hits_addend, Some(UInt64Value { value: 7 }));
        let limit = d.limit.unwrap();
        assert_eq!(
            (limit.requests_per_unit, limit.unit),
            (5, RateLimitUnit::Hour as i32)
        );
        assert!(serde_json::from_str::<JsonRequest>(r#"{"domain":"d","extra":1}"#).is_err());
        let big: JsonRequest = serde_json::from_str(r#"{"hitsAddend":4294967296}"#).unwrap();
        assert!(big.into_proto().is_err());
    }
}
