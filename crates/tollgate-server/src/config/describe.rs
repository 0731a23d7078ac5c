//! Limits in words, for `tollgate serve --check`.

use tollgate::{Algorithm, Limit};
use tollgate_http::{Mode, Rule};

use super::{Action, LimitEntry, StoreErrorMode};

const NAMED: [(u64, &str); 7] = [
    (86_400_000_000_000, "day"),
    (3_600_000_000_000, "hour"),
    (60_000_000_000, "minute"),
    (1_000_000_000, "second"),
    (1_000_000, "millisecond"),
    (1_000, "microsecond"),
    (1, "nanosecond"),
];

/// `minute`, `90 seconds`, `1500 milliseconds`: the largest unit that
/// divides the period exactly, so the words are exact too.
pub fn describe_period(ns: u64) -> String {
    let (unit_ns, name) = NAMED
        .iter()
        .copied()
        .find(|(unit_ns, _)| ns.is_multiple_of(*unit_ns))
        .unwrap_or((1, "nanosecond"));
    match ns / unit_ns {
        1 => name.to_string(),
        n => format!("{n} {name}s"),
    }
}

fn algorithm_words(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::FixedWindow => "fixed window",
        Algorithm::SlidingLog => "sliding log",
        Algorithm::SlidingCounter => "sliding window counter",
        Algorithm::TokenBucket => "token bucket",
        Algorithm::Gcra => "GCRA",
        Algorithm::LeakyBucket => "leaky bucket",
        Algorithm::LeakyQueue => "leaky queue",
    }
}

/// `token bucket: 100 per minute, bursts of 20`.
pub fn describe_limit(limit: &Limit) -> String {
    let q = &limit.quota;
    let mut out = format!(
        "{}: {} per {}",
        algorithm_words(limit.algorithm),
        q.limit(),
        describe_period(q.period_ns())
    );
    if limit.algorithm.uses_burst() && q.burst() != q.limit() {
        out.push_str(&format!(", bursts of {}", q.burst()));
    }
    out
}

fn describe_limits(limits: &[Limit]) -> String {
    let words: Vec<String> = limits.iter().map(describe_limit).collect();
    match words.as_slice() {
        [one] => one.clone(),
        all => format!("all of ({})", all.join("; ")),
    }
}

pub(super) fn describe_entry(entry: &LimitEntry) -> String {
    let mut out = format!("{}: ", entry.path);
    match &entry.action {
        Action::Unlimited => out.push_str("unlimited"),
        Action::Block => out.push_str("every request over the limit (0 per unit)"),
        Action::Limit(policy) => out.push_str(&describe_limits(policy.limits())),
    }
    if entry.shadow {
        out.push_str(" [shadow mode: counted, never enforced]");
    }
    if let Some(name) = &entry.name {
        out.push_str(&format!(" [named `{name}`]"));
    }
    if !entry.replaces.is_empty() {
        out.push_str(&format!(" [replaces {}]", entry.replaces.join(", ")));
    }
    if entry.quota_mode {
        out.push_str(" [quota mode: refuses only when every quota is over]");
    }
    match entry.on_store_error {
        StoreErrorMode::Open => {}
        StoreErrorMode::Closed => out.push_str(" [fails closed]"),
        StoreErrorMode::Fallback => out.push_str(" [falls back to this instance's share]"),
    }
    out
}

pub(super) fn describe_rule(rule: &Rule, mode: Mode, key: &str) -> String {
    let mut out = format!(
        "http rule `{}`: {} per {key}",
        rule.name(),
        describe_limits(rule.policy().limits())
    );
    if mode == Mode::Shadow {
        out.push_str(" [shadow mode: counted, never enforced]");
    }
    out
}
