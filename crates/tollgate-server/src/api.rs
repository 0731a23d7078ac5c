//! The HTTP JSON API: `POST /v1/check`, `GET /v1/top`, `GET /healthz`,
//! `GET /readyz`, `GET /metrics`, and `GET /top`, the live page over
//! `/v1/top` ([`tollgate_http::TopPage`]).
//!
//! A check answers `200` when every descriptor is under its limit and `429`
//! (with `Retry-After`) when one is over, with the same JSON body; a bad
//! request gets `400` with `{"error": ..., "field": ...}` naming the field.
//!
//! ```text
//! curl -s localhost:8080/v1/check -d '{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"ada"}]}]}'
//! {"overall_code":"OK","statuses":[{"code":"OK","current_limit":{...},"limit_remaining":99,...}]}
//! ```

mod token;
mod top;

use std::sync::{Arc, LazyLock};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tollgate::{Algorithm, Backend, BackendError, BackendExt, Limit, Policy, Quota};
use tollgate_http::{fields, TopPage};

use crate::engine::{
    AppliedLimit, CheckError, CheckRequest, CheckResponse, Code, DescriptorRequest,
    DescriptorStatus, Engine,
};
use crate::metrics;

pub use self::token::{ApiToken, TokenError};

/// The most a `/v1/check` body may hold.
pub const MAX_CHECK_BODY: usize = 64 * 1024;

/// The API's routes over a shared engine; with a `token`, `/v1/*` and
/// `/metrics` need it ([`token`]), the health probes never do, nor does
/// `/top`, a page holding no data that polls `/v1/top` with the token.
pub fn router<B: Backend + 'static>(engine: Arc<Engine<B>>, token: Option<ApiToken>) -> Router {
    let guarded = Router::new()
        .route("/v1/check", post(check::<B>))
        .route("/v1/top", get(top::top::<B>))
        .route("/metrics", get(render_metrics));
    let guarded = guard(guarded, token);
    Router::new()
        .route(
            "/healthz",
            get(|| async { Json(serde_json::json!({"status": "ok"})) }),
        )
        .route("/readyz", get(ready::<B>))
        .route_service("/top", TopPage::polling("/v1/top"))
        .merge(guarded)
        .with_state(engine)
}

/// `router`'s routes answering only requests with `token`, when there is
/// one.
pub(crate) fn guard<S: Clone + Send + Sync + 'static>(
    router: Router<S>,
    token: Option<ApiToken>,
) -> Router<S> {
    match token {
        Some(token) => router.route_layer(middleware::from_fn_with_state(
            Arc::new(token),
            token::require,
        )),
        None => router,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    key: String,
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Descriptor {
    entries: Vec<Entry>,
    hits: Option<u64>,
    #[serde(default)]
    negative: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Check {
    domain: String,
    descriptors: Vec<Descriptor>,
    #[serde(default)]
    hits: u64,
}

#[derive(Serialize)]
struct LimitOut<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    algorithm: Option<&'static str>,
    requests_per_unit: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    period_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    burst: Option<u64>,
}

#[derive(Serialize)]
struct StatusOut<'a> {
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_limit: Option<LimitOut<'a>>,
    /// Absent for an unlimited descriptor.
    #[serde(skip_serializing_if = "Option::is_none")]
    limit_remaining: Option<u64>,
    duration_until_reset_ns: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_ns: Option<u64>,
}

#[derive(Serialize)]
struct CheckOut<'a> {
    overall_code: &'static str,
    statuses: Vec<StatusOut<'a>>,
}

fn code(c: Code) -> &'static str {
    match c {
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    }
}

fn limit_out(applied: &AppliedLimit) -> LimitOut<'_> {
    let limit: Option<&Limit> = applied.limit.as_ref();
    LimitOut {
        name: applied.label(),
        algorithm: limit.map(|l| l.algorithm.name()),
        requests_per_unit: limit.map_or(0, |l| l.quota.limit()),
        period_ns: limit.map(|l| l.quota.period_ns()),
        burst: limit
            .filter(|l| l.algorithm.uses_burst())
            .map(|l| l.quota.burst()),
    }
}

fn error(status: StatusCode, message: String, field: Option<String>) -> Response {
    let body = serde_json::json!({ "error": message, "field": field });
    (status, Json(body)).into_response()
}

fn parse(body: &[u8]) -> Result<CheckRequest, Box<Response>> {
    if body.len() > MAX_CHECK_BODY {
        return Err(Box::new(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is over {MAX_CHECK_BODY} bytes"),
            None,
        )));
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    let check: Check = serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let field = (field != ".").then_some(field);
        Box::new(error(StatusCode::BAD_REQUEST, e.inner().to_string(), field))
    })?;
    Ok(CheckRequest {
        domain: check.domain,
        hits: check.hits,
        descriptors: check
            .descriptors
            .into_iter()
            .map(|d| DescriptorRequest {
                entries: d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
                hits: d.hits,
                negative: d.negative,
                limit: None,
            })
            .collect(),
    })
}

fn answer(response: &CheckResponse) -> Response {
    let out = CheckOut {
        overall_code: code(response.overall),
        statuses: response
            .statuses
            .iter()
            .map(|s| StatusOut {
                code: code(s.code),
                current_limit: s.limit.as_ref().map(limit_out),
                limit_remaining: s.remaining,
                duration_until_reset_ns: s.reset_after_ns,
                retry_after_ns: s.retry_after_ns,
            })
            .collect(),
    };
    let mut res = Json(out).into_response();
    if response.overall == Code::OverLimit {
        let over = response
            .statuses
            .iter()
            .filter(|s| s.code == Code::OverLimit);
        if over.clone().any(never_fits) {
            // As the HTTP layer: no wait would let it through, so no
            // `Retry-After` to tempt a client into waiting for nothing.
            *res.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
            return res;
        }
        *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        let wait = over
            .map(|s| s.retry_after_ns.unwrap_or(s.reset_after_ns))
            .max()
            .unwrap_or(0);
        res.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(fields::retry_after_secs(wait)),
        );
    }
    res
}

/// Whether a refused descriptor asked for more than its limit can ever hold:
/// the engine reports that wait as `u64::MAX` nanoseconds (the store's
/// `RetryAfter::Never`).
fn never_fits(status: &DescriptorStatus) -> bool {
    status.retry_after_ns == Some(u64::MAX)
}

async fn check<B: Backend + 'static>(
    State(engine): State<Arc<Engine<B>>>,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let request = match parse(&body) {
        Ok(request) => request,
        Err(res) => return *res,
    };
    let result = engine.check(&request).await;
    metrics::decision_time("http", started);
    match result {
        Ok(response) => answer(&response),
        Err(e @ CheckError::Store { .. }) => store_unavailable(e.to_string()),
        Err(e) => {
            let field = match e {
                CheckError::EmptyDomain => "domain".to_string(),
                CheckError::NoDescriptors => "descriptors".to_string(),
                CheckError::EmptyDescriptor(i) => format!("descriptors[{i}].entries"),
                CheckError::TooLong {
                    descriptor,
                    entry,
                    part,
                    ..
                } => format!("descriptors[{descriptor}].entries[{entry}].{part}"),
                CheckError::Store { .. } => unreachable!("answered above"),
            };
            error(StatusCode::BAD_REQUEST, e.to_string(), Some(field))
        }
    }
}

/// A store answers a peek on this key and policy when it is ready.
static PROBE: LazyLock<Policy> = LazyLock::new(|| {
    let quota = Quota::per_second(1).expect("1 per second is a valid quota");
    Policy::new(Limit::new(Algorithm::FixedWindow, quota))
});

/// Whether the store answers a peek.
pub(crate) async fn store_ready<B: Backend>(engine: &Engine<B>) -> Result<(), BackendError> {
    let store = engine.backend();
    let probe = store.prepare(&PROBE)?;
    store.check("tollgate-readyz", &probe, 0).await.map(drop)
}

/// Seconds a client is asked to wait after a store failure: the reverse
/// proxy's (the HTTP layer's default), so both APIs answer alike.
const STORE_RETRY_AFTER_SECS: u64 = 1;

/// `503` for a limit failing closed on a store error, with `Retry-After`.
pub(crate) fn store_unavailable(message: String) -> Response {
    let mut res = error(StatusCode::SERVICE_UNAVAILABLE, message, None);
    res.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(STORE_RETRY_AFTER_SECS),
    );
    res
}

async fn ready<B: Backend + 'static>(State(engine): State<Arc<Engine<B>>>) -> Response {
    match store_ready(&engine).await {
        Ok(_) => Json(serde_json::json!({"status": "ready"})).into_response(),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("store not ready: {e}"),
            None,
        ),
    }
}

/// `/metrics` alone, at `path`, for a listener of its own.
pub fn metrics_router(path: &str) -> Router {
    Router::new().route(path, get(render_metrics))
}

async fn render_metrics() -> Response {
    let mut res = metrics::render().into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    res
}
