//! `GET /v1/top` as JSON: each rule's totals and heaviest keys over the
//! last minute and ten minutes, from the library's
//! [`HeavyHitters`](tollgate::top::HeavyHitters) summaries (their algorithm
//! and error bound are in [`tollgate::top`]), and [`TopService`], the tower
//! service a layer's user mounts to serve it.
//!
//! ```text
//! {"rules":[{"rule":"per-ip","limit":{"requests":100,"period_ns":60000000000},
//!   "windows":[{"window_s":60,"covered_ns":57000000000,"error_bound":0,
//!     "totals":{"hits":130,"admitted":100,"refused":30,"shadow_refused":0,"refusal_ratio":0.23},
//!     "keys":[{"key":"ip=203.0.113.7","hits":130,"error":0,"admitted":100,"refused":30,
//!              "shadow_refused":0,"refusal_ratio":0.23,"limit_ratio":1.37}]}, ...]}]}
//! ```

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{header, HeaderValue, Request, Response, StatusCode};
use serde::Serialize;
use tollgate::top::{Counts, HeavyHitters, KeyCount, WindowReport};
use tollgate::{Clock, Limit};

/// The windows reported: the last minute and the last ten (each at most
/// the span the summaries keep).
pub const WINDOWS_NS: [u64; 2] = [60_000_000_000, 600_000_000_000];

/// Keys reported per window unless the query asks (`?n=`).
pub const DEFAULT_KEYS: usize = 10;

/// One rule to report: its name, the limit its keys are compared with
/// (`None` when it has no single one) and its summary.
pub struct TopRule<'a> {
    /// The rule's name.
    pub name: &'a str,
    /// The limit `limit_ratio` is measured against.
    pub limit: Option<Limit>,
    /// Its keys.
    pub summary: &'a HeavyHitters,
}

#[derive(Serialize)]
struct CountsOut {
    hits: u64,
    admitted: u64,
    refused: u64,
    shadow_refused: u64,
    refusal_ratio: f64,
}

impl From<&Counts> for CountsOut {
    fn from(c: &Counts) -> Self {
        CountsOut {
            hits: c.total(),
            admitted: c.admitted,
            refused: c.refused,
            shadow_refused: c.shadow_refused,
            refusal_ratio: c.refusal_ratio(),
        }
    }
}

#[derive(Serialize)]
struct KeyOut<'a> {
    key: &'a str,
    hits: u64,
    error: u64,
    admitted: u64,
    refused: u64,
    shadow_refused: u64,
    refusal_ratio: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit_ratio: Option<f64>,
}

#[derive(Serialize)]
struct WindowOut<'a> {
    window_s: u64,
    covered_ns: u64,
    error_bound: u64,
    totals: CountsOut,
    keys: Vec<KeyOut<'a>>,
}

#[derive(Serialize)]
struct LimitOut {
    requests: u64,
    period_ns: u64,
}

#[derive(Serialize)]
struct RuleOut<'a> {
    rule: &'a str,
    limit: Option<LimitOut>,
    windows: Vec<WindowOut<'a>>,
}

fn window_out<'a>(report: &'a WindowReport, limit: Option<&Limit>) -> WindowOut<'a> {
    let key_out = |k: &'a KeyCount| KeyOut {
        key: &k.key,
        hits: k.hits,
        error: k.error,
        // What the key did while tracked: the hits before are in `error`.
        admitted: k.counts.admitted,
        refused: k.counts.refused,
        shadow_refused: k.counts.shadow_refused,
        refusal_ratio: k.counts.refusal_ratio(),
        limit_ratio: limit.and_then(|l| report.limit_ratio(k, l)),
    };
    WindowOut {
        window_s: report.window_ns / 1_000_000_000,
        covered_ns: report.covered_ns,
        error_bound: report.error_bound,
        totals: CountsOut::from(&report.totals),
        keys: report.keys.iter().map(key_out).collect(),
    }
}

/// The JSON body of `/v1/top` for `rules` at `now_ns`, `n` keys per window.
pub fn top_json<'a>(rules: impl IntoIterator<Item = TopRule<'a>>, now_ns: u64, n: usize) -> String {
    top_value(rules, now_ns, n).to_string()
}

/// [`top_json`]'s body as a value, for a server that adds its own fields.
pub fn top_value<'a>(
    rules: impl IntoIterator<Item = TopRule<'a>>,
    now_ns: u64,
    n: usize,
) -> serde_json::Value {
    let rules: Vec<(TopRule<'a>, Vec<WindowReport>)> = rules
        .into_iter()
        .map(|rule| {
            let reports = WINDOWS_NS
                .iter()
                .map(|&w| rule.summary.report(now_ns, w, n))
                .collect();
            (rule, reports)
        })
        .collect();
    let out: Vec<RuleOut<'_>> = rules
        .iter()
        .map(|(rule, reports)| RuleOut {
            rule: rule.name,
            limit: rule.limit.map(|l| LimitOut {
                requests: l.quota.limit(),
                period_ns: l.quota.period_ns(),
            }),
            windows: reports
                .iter()
                .map(|r| window_out(r, rule.limit.as_ref()))
                .collect(),
        })
        .collect();
    serde_json::json!({ "rules": out })
}

/// How many keys a `/v1/top` query asks for (`n=`, 1 to `max`), or why it
/// is refused.
pub fn keys_asked(query: Option<&str>, max: usize) -> Result<usize, String> {
    let Some(n) = query
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix("n="))
    else {
        return Ok(DEFAULT_KEYS.min(max));
    };
    match n.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("`n` must be a number from 1 to {max}")),
    }
}

/// A JSON answer with `status`.
pub fn json_response(status: StatusCode, body: String) -> Response<String> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A layer rule's name, limit and summary.
pub(crate) type Summarised = (Arc<str>, Option<Limit>, Arc<HeavyHitters>);

/// The layer's `/v1/top`, as a tower service to mount wherever the
/// application chooses (and behind whatever guards it: the keys it names
/// are its clients). From [`RateLimit::top_service`](crate::RateLimit::top_service).
#[derive(Clone)]
pub struct TopService {
    pub(crate) rules: Arc<[Summarised]>,
    pub(crate) clock: Arc<dyn Clock>,
}

impl<B> tower_service::Service<Request<B>> for TopService {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let max = self
            .rules
            .first()
            .map_or(DEFAULT_KEYS, |(_, _, s)| s.config().capacity());
        let response = match keys_asked(request.uri().query(), max) {
            Ok(n) => {
                let rules = self.rules.iter().map(|(name, limit, summary)| TopRule {
                    name,
                    limit: *limit,
                    summary,
                });
                json_response(StatusCode::OK, top_json(rules, self.clock.now(), n))
            }
            Err(message) => json_response(
                StatusCode::BAD_REQUEST,
                serde_json::json!({ "error": message, "field": "n" }).to_string(),
            ),
        };
        ready(Ok(response))
    }
}

/// The live page's HTML, with `{{JSON_PATH}}` where the JSON's path goes.
const PAGE: &str = include_str!("top.html");

/// The live page over `/v1/top`, as a tower service: one HTML document, no
/// asset fetched from anywhere, whose script polls the JSON every 3 s and
/// draws each rule's rates over the last five minutes, its top keys and
/// (when the JSON has them, as `tollgate serve`'s does) the store's state
/// and the configuration in force. The page holds no data itself: it shows
/// what the JSON's guard lets through. The token it sends as
/// `Authorization: Bearer` comes from the link's fragment (`#token=...`,
/// which browsers never send to a server) or a form, and stays in the
/// tab's `sessionStorage`. From
/// [`RateLimit::top_page_service`](crate::RateLimit::top_page_service), or
/// [`TopPage::polling`] for a JSON mounted elsewhere.
#[derive(Clone)]
pub struct TopPage {
    html: Arc<str>,
}

impl TopPage {
    /// The page polling the JSON at `json_path` (an absolute path on the
    /// page's own origin, such as `/v1/top`).
    pub fn polling(json_path: &str) -> Self {
        let escaped = json_path
            .replace('&', "&amp;")
            .replace('"', "&quot;")
            .replace('<', "&lt;");
        TopPage {
            html: PAGE.replace("{{JSON_PATH}}", &escaped).into(),
        }
    }

    /// The page's HTML.
    pub fn html(&self) -> &str {
        &self.html
    }
}

impl<B> tower_service::Service<Request<B>> for TopPage {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: Request<B>) -> Self::Future {
        let mut response = Response::new(self.html.to_string());
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        // Its own script and style only; nothing loaded from elsewhere,
        // nothing framed, polling only its own origin.
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'; frame-ancestors 'none'",
            ),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        ready(Ok(response))
    }
}
