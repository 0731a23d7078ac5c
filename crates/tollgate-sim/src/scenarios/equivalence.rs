//! The token bucket, GCRA and the leaky meter are one algorithm stored three
//! ways: on every request of many traffic patterns, all three must return
//! the same decision, field for field.

use serde::Serialize;
use tollgate_core::{Algorithm, Quota, State};

use super::{adversarial, batches, boundary_burst, requests, seed004, Scenario};
use crate::report::{Check, Details, ScenarioReport};
use crate::rng::PyRandom;
use crate::traffic::{seconds_to_ns, KeyMix, OnOff, Poisson, Request, Shape, NS_PER_S};

/// One traffic pattern's comparison.
#[derive(Clone, Debug, Serialize)]
pub struct PatternRow {
    /// What the traffic is.
    pub name: String,
    /// The quota, e.g. `100/60s burst 20`.
    pub quota: String,
    /// Requests, each decided by all three algorithms.
    pub decisions: u64,
    /// Requests on which the three decisions were not identical.
    pub disagreements: u64,
}

const COMPARED: [Algorithm; 3] = [
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::LeakyBucket,
];

/// Decides `trace` (multi-key) with all three and counts requests whose
/// decisions differ in any field.
fn compare(name: String, quota: Quota, trace: &[Request]) -> PatternRow {
    let mut keys: std::collections::HashMap<u32, [State; 3]> = Default::default();
    let mut disagreements = 0;
    for r in trace {
        let states = keys
            .entry(r.key)
            .or_insert_with(|| COMPARED.map(|a| State::new(a, &quota)));
        let [a, b, c] = states.each_mut().map(|s| s.decide(&quota, r.at, r.cost));
        if a != b || b != c {
            disagreements += 1;
        }
    }
    PatternRow {
        name,
        quota: describe(&quota),
        decisions: trace.len() as u64,
        disagreements,
    }
}

fn describe(q: &Quota) -> String {
    let period = q.period_ns();
    let p = if period % NS_PER_S == 0 {
        format!("{}s", period / NS_PER_S)
    } else {
        format!("{period}ns")
    };
    format!("{}/{p} burst {}", q.limit(), q.burst())
}

/// The quotas random patterns run under: seconds to hours, bursts below,
/// at and above the limit, and a period that is not a round number.
fn quotas() -> Vec<Quota> {
    [
        (10, NS_PER_S, 20),
        (100, 60 * NS_PER_S, 20),
        (100, 60 * NS_PER_S, 100),
        (7, 999_999_937, 3),
        (1_000, 3_600 * NS_PER_S, 50),
        (3, 1_000_000, 1),
    ]
    .into_iter()
    .map(|(l, p, b)| Quota::with_parts(l, p, b).expect("valid"))
    .collect()
}

/// About this many requests per random pattern.
const PER_PATTERN: f64 = 4_000.0;

/// The random patterns for one quota: Poisson at 1.5 times its rate, on/off
/// bursts at the same long-run rate, random costs (including peeks and costs that never fit), and
/// clock jitter that sends some requests back in time.
fn random_patterns(q: Quota, seed: u64) -> Vec<(String, Vec<Request>)> {
    let rate = q.limit() as f64 / (q.period_ns() as f64 / 1e9) * 1.5;
    let duration = PER_PATTERN / rate;
    let poisson: Vec<u64> = Poisson::new(seed, rate, duration).collect();
    // About five on spells, on a quarter of the time at four times the rate.
    let on = duration / 20.0;
    let on_off = OnOff::with_rng(PyRandom::new(seed + 1), rate * 4.0, on, 3.0 * on, duration);
    let mut rng = PyRandom::new(seed + 2);
    let costs = poisson
        .iter()
        .map(|&at| Request {
            at,
            key: 0,
            cost: (rng.random() * (q.burst() + 2) as f64) as u64,
        })
        .collect();
    let interval = q.period_ns() as f64 / q.limit() as f64 / 1e9;
    let jitter = poisson
        .iter()
        .map(|&at| {
            let back = seconds_to_ns(rng.random() * 3.0 * interval);
            Request::at(at.saturating_sub(back))
        })
        .collect();
    vec![
        ("poisson x1.5 rate".into(), requests(poisson)),
        ("on/off bursts".into(), requests(on_off)),
        ("random costs 0..=burst+1".into(), costs),
        ("clock jitter (out of order)".into(), jitter),
    ]
}

/// Every pattern with its quota.
pub fn patterns() -> Vec<(String, Quota, Vec<Request>)> {
    let per_minute = |b| {
        Quota::per_minute(100)
            .and_then(|q| q.with_burst(b))
            .expect("valid")
    };
    let per_second = Quota::per_second(10)
        .and_then(|q| q.with_burst(20))
        .expect("valid");
    let mut out = vec![
        (
            "boundary-burst".into(),
            per_minute(20),
            boundary_burst::trace(),
        ),
        (
            "boundary-burst".into(),
            per_minute(100),
            boundary_burst::trace(),
        ),
        ("batches".into(), per_minute(100), batches::trace()),
        ("adversarial".into(), per_minute(100), adversarial::trace()),
        (
            "poisson (pattern A)".into(),
            per_second,
            seed004::poisson_trace(),
        ),
        (
            "burst-after-idle (pattern B)".into(),
            per_second,
            seed004::burst_after_idle_trace(),
        ),
        (
            "boundary-attack (pattern C)".into(),
            per_second,
            seed004::boundary_attack_trace(),
        ),
    ];
    for (i, q) in quotas().into_iter().enumerate() {
        for (name, trace) in random_patterns(q, 100 + 10 * i as u64) {
            out.push((name, q, trace));
        }
    }
    let mix = KeyMix {
        keys: 50,
        min_per_min: 20.0,
        max_per_min: 300.0,
        duration_s: 120.0,
        shape: Shape::Bursty,
        seed: 7,
    };
    out.push(("50 keys, bursty mix".into(), per_minute(20), mix.merged()));
    out
}

/// Runs the scenario.
pub fn run() -> Scenario {
    let rows: Vec<PatternRow> = patterns()
        .into_iter()
        .map(|(name, q, trace)| compare(name, q, &trace))
        .collect();
    let decisions = rows.iter().map(|r| r.decisions).sum();
    let disagreements = rows.iter().map(|r| r.disagreements).sum();
    let checks = vec![
        Check::equal(
            "disagreements between token bucket, GCRA and leaky meter",
            0,
            disagreements,
            "",
        ),
        Check::judged(
            "decisions compared",
            "132,388 on 23 patterns".into(),
            format!("{decisions} on {} patterns", rows.len()),
            decisions > 100_000 && rows.len() >= 23,
            "fewer than the seed's",
        ),
    ];
    Scenario {
        report: ScenarioReport {
            name: "equivalence",
            title: "token bucket vs GCRA vs leaky meter, decision by decision".into(),
            source: "seed 000",
            traffic: format!(
                "{} patterns: the named scenarios' traces and, under each of {} quotas, \
                 Poisson, on/off, random-cost and jittered-clock traffic, plus a 50-key mix.",
                rows.len(),
                quotas().len()
            ),
            requests: decisions,
            rows: Vec::new(),
            details: Details::Equivalence {
                decisions,
                disagreements,
                patterns: rows,
            },
            checks,
            notes: vec![
                "A disagreement is any difference in allowed, remaining, retry_after, \
                 reset_after or delay, not only in the verdict."
                    .to_string(),
            ],
            charts: Vec::new(),
        },
        charts: Vec::new(),
    }
}
