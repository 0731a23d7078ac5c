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

use std::sync::Arc;

use metrics::{Key, Label, Level, Metadata, SharedString};

/// Decisions per rule and outcome.
pub const DECISIONS: &str = "tollgate_http_decisions_total";
/// The layer's own latency per request.
pub const DECISION_SECONDS: &str = "tollgate_http_decision_seconds";
/// Refunds and forced charges the store failed.
pub const SETTLE_ERRORS: &str = "tollgate_http_settle_errors_total";

const METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

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
    const ALL: [Outcome; 8] = [
        Outcome::Allowed,
        Outcome::Denied,
        Outcome::TooLarge,
        Outcome::ShadowDenied,
        Outcome::FailedOpen,
        Outcome::FailedClosed,
        Outcome::BadRequest,
        Outcome::Abandoned,
    ];

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

/// A settlement after the decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Refund,
    Force,
}

impl Op {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Refund => "refund",
            Op::Force => "force",
        }
    }
}

/// A rule's metric keys, built once so that counting on every request
/// allocates nothing. They are looked up in whichever recorder is installed
/// at the time, so a recorder installed after the layer is built still
/// sees everything.
pub(crate) struct RuleMetrics {
    decisions: Vec<Key>,
    settle: [Key; 2],
}

impl RuleMetrics {
    pub(crate) fn new(rule: &Arc<str>) -> Self {
        let name = || SharedString::from_shared(Arc::clone(rule));
        let key = |metric: &'static str, label: &'static str, value: &'static str| {
            Key::from_parts(
                metric,
                vec![Label::new("rule", name()), Label::new(label, value)],
            )
        };
        RuleMetrics {
            decisions: Outcome::ALL
                .iter()
                .map(|o| key(DECISIONS, "outcome", o.label()))
                .collect(),
            settle: [
                key(SETTLE_ERRORS, "op", Op::Refund.name()),
                key(SETTLE_ERRORS, "op", Op::Force.name()),
            ],
        }
    }

    pub(crate) fn count(&self, outcome: Outcome) {
        increment(&self.decisions[outcome as usize]);
    }

    pub(crate) fn settle_failed(&self, op: Op) {
        increment(&self.settle[op as usize]);
    }
}

fn increment(key: &Key) {
    metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA).increment(1));
}

pub(crate) fn latency(started: quanta::Instant) {
    // Made once, as the rules' keys are: the macro builds it per request.
    static KEY: Key = Key::from_static_name(DECISION_SECONDS);
    let seconds = started.elapsed().as_secs_f64();
    metrics::with_recorder(|recorder| recorder.register_histogram(&KEY, &METADATA).record(seconds));
}
