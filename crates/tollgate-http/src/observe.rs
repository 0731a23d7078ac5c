//! Counters, the latency histogram and their names, through the `metrics`
//! facade: install any recorder (Prometheus, StatsD) and they are exported.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `tollgate_http_decisions_total` | counter | `rule`, `outcome` |
//! | `tollgate_http_decision_seconds` | histogram | none: time from the request's arrival to the layer's verdict, queueing excluded |
//! | `tollgate_http_settle_errors_total` | counter | `rule`, `op` (`refund`, `force`): a settlement the store failed, so the charge stands |
//!
//! Each is looked up in the recorder installed at the time, on every
//! request, unless the layer was built with
//! [`register_metrics_once`](crate::RateLimitBuilder::register_metrics_once):
//! then the handles of the recorder installed at build time are kept.
//!
//! `outcome` is one of `allowed`, `denied`, `too_large`, `shadow_denied`,
//! `failed_open`, `failed_closed`, `bad_request`, `abandoned` (a queued
//! client went away and its charge was given back).

use std::sync::Arc;

use metrics::{Counter, Histogram, Key, Label, Level, Metadata, SharedString};

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
/// sees everything; or, once [`registered`](RuleMetrics::register), the
/// handles of the recorder installed then are kept, with no look-up.
pub(crate) struct RuleMetrics {
    decisions: Vec<Key>,
    settle: [Key; 2],
    registered: Option<Registered>,
}

/// A rule's counters, registered with one recorder.
struct Registered {
    decisions: Vec<Counter>,
    settle: [Counter; 2],
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
            registered: None,
        }
    }

    /// Registers every counter with the recorder installed now, for good.
    pub(crate) fn register(&mut self) {
        self.registered = Some(Registered {
            decisions: self.decisions.iter().map(counter).collect(),
            settle: [counter(&self.settle[0]), counter(&self.settle[1])],
        });
    }

    pub(crate) fn count(&self, outcome: Outcome) {
        match &self.registered {
            Some(r) => r.decisions[outcome as usize].increment(1),
            None => counter(&self.decisions[outcome as usize]).increment(1),
        }
    }

    pub(crate) fn settle_failed(&self, op: Op) {
        match &self.registered {
            Some(r) => r.settle[op as usize].increment(1),
            None => counter(&self.settle[op as usize]).increment(1),
        }
    }
}

/// `key`'s counter in the recorder installed now.
fn counter(key: &Key) -> Counter {
    metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA))
}

/// The latency histogram of the recorder installed now.
fn histogram() -> Histogram {
    metrics::with_recorder(|recorder| recorder.register_histogram(&LATENCY, &METADATA))
}

/// The layer's latency histogram: looked up in the recorder installed at
/// the time on each request, or registered once (as [`RuleMetrics`]).
#[derive(Default)]
pub(crate) struct Latency(Option<Histogram>);

// Made once, as the rules' keys are: the macro builds it per request.
static LATENCY: Key = Key::from_static_name(DECISION_SECONDS);

impl Latency {
    /// The histogram of the recorder installed now, kept for good.
    pub(crate) fn registered() -> Self {
        Latency(Some(histogram()))
    }

    /// Records the time since `started`.
    pub(crate) fn record(&self, started: quanta::Instant) {
        let seconds = started.elapsed().as_secs_f64();
        match &self.0 {
            Some(histogram) => histogram.record(seconds),
            None => histogram().record(seconds),
        }
    }
}
