//! Counters, the latency histogram and their names, through the `metrics`
//! facade: install any recorder (Prometheus, StatsD) and they are exported.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `tollgate_http_decisions_total` | counter | `rule`, `outcome` |
//! | `tollgate_http_decision_seconds` | histogram | none: time from the request's arrival to the layer's verdict, queueing excluded |
//! | `tollgate_http_settle_errors_total` | counter | `rule`, `op` (`refund`, `force`): a settlement the store failed, so the charge stands |
//!
//! `outcome` is one of `allowed`, `denied`, `too_large`, `shadow_denied`,
//! `failed_open`, `failed_closed`, `bad_request`, `abandoned` (a queued
//! client went away and its charge was given back).

use metrics::SharedString;

/// Decisions per rule and outcome.
pub const DECISIONS: &str = "tollgate_http_decisions_total";
/// The layer's own latency per request.
pub const DECISION_SECONDS: &str = "tollgate_http_decision_seconds";
/// Refunds and forced charges the store failed.
pub const SETTLE_ERRORS: &str = "tollgate_http_settle_errors_total";

/// What one rule did with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Allowed,
    Denied,
    TooLarge,
    ShadowDenied,
    FailedOpen,
    FailedClosed,
    BadRequest,
    Abandoned,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::TooLarge => "too_large",
            Outcome::ShadowDenied => "shadow_denied",
            Outcome::FailedOpen => "failed_open",
            Outcome::FailedClosed => "failed_closed",
            Outcome::BadRequest => "bad_request",
            Outcome::Abandoned => "abandoned",
        }
    }
}

pub(crate) fn count(rule: &SharedString, outcome: Outcome) {
    metrics::counter!(DECISIONS, "rule" => rule.clone(), "outcome" => outcome.label()).increment(1);
}

pub(crate) fn settle_failed(rule: &SharedString, op: &'static str) {
    metrics::counter!(SETTLE_ERRORS, "rule" => rule.clone(), "op" => op).increment(1);
}

pub(crate) fn latency(started: quanta::Instant) {
    metrics::histogram!(DECISION_SECONDS).record(started.elapsed().as_secs_f64());
}
