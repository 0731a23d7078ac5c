//! Seed 000's Cloudflare-style study of the sliding counter on many keys.
//!
//! Each key sends at its own rate (drawn from 20 to 300 a minute) for about
//! 6.5 minutes, against 100 a minute. Two questions, two modes:
//!
//! - *measurement* (every request counted, as Cloudflare measured): how
//!   often does the counter's verdict differ from the exact log's? Both see
//!   every request. Each runs in the core under a quota so large that
//!   nothing is refused, and the verdict for 100 a minute is read from the
//!   decision's `remaining`: the count is `L - remaining`, and by the
//!   admission rules a request fits under 100 exactly when that count
//!   (this request included) is at most 100.
//! - *limiter* (only admitted requests count): with the counter really
//!   limiting at 100 a minute, the most any key got through in any 60 s,
//!   and how many keys ever got more than 100 through in some 60 s.
//!
//! Keys are independent, so each key's traffic is generated, decided and
//! summarised on its own, on all cores, and never stored as one trace.

mod findings;

use std::sync::atomic::{AtomicU32, Ordering};

use serde::Serialize;
use tollgate_core::{Algorithm, Quota, State};

pub use findings::{AccuracyReport, RateBin, ShapeReport};

use super::Scenario;
use crate::metrics::{worst_span, Charge};
use crate::report::{Details, ScenarioReport};
use crate::traffic::{KeyMix, Shape, NS_PER_S};
use crate::Progress;

/// The limit studied, per minute.
pub const LIMIT: u64 = 100;
/// The "never refuses" limit used to count every request.
const COUNT_ALL: u64 = 1_000_000;
/// Keys per unit of parallel work.
const CHUNK: u32 = 64;

/// The study's size.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Config {
    /// Keys per run.
    pub keys: u32,
    /// Runs per traffic shape, with seeds 1, 2, ...
    pub runs: u32,
    /// Length of each run, seconds.
    pub duration_s: f64,
    /// Lowest key rate, per minute.
    pub min_per_min: f64,
    /// Highest key rate, per minute.
    pub max_per_min: f64,
}

impl Config {
    /// The published study: 10,000 keys at 20 to 300 a minute, 5 runs of
    /// 6.5 minutes (about 10.4 million requests each).
    pub const PUBLISHED: Config = Config {
        keys: 10_000,
        runs: 5,
        duration_s: 390.0,
        min_per_min: 20.0,
        max_per_min: 300.0,
    };

    /// Units of progress: keys over all runs and shapes.
    pub fn work(&self) -> u64 {
        self.keys as u64 * self.runs as u64 * Shape::ALL.len() as u64
    }
}

/// One key's results in one run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KeyResult {
    /// The key's rate, requests per minute.
    pub per_min: f64,
    /// Requests it sent.
    pub requests: u64,
    /// Measurement mode: the counter admits where the log refuses.
    pub wrongly_allowed: u64,
    /// Measurement mode: the counter refuses where the log admits.
    pub wrongly_limited: u64,
    /// Limiter mode: most admitted in any 60 s.
    pub worst_60s: u64,
}

/// Runs key `key` of `mix` through both modes. `admitted` is a buffer
/// reused from key to key.
pub fn run_key(mix: &KeyMix, key: u32, admitted: &mut Vec<Charge>) -> KeyResult {
    let limit = Quota::per_minute(LIMIT).expect("valid");
    let all = Quota::per_minute(COUNT_ALL).expect("valid");
    let mut exact = State::new(Algorithm::SlidingLog, &all);
    let mut approx = State::new(Algorithm::SlidingCounter, &all);
    let mut limiter = State::new(Algorithm::SlidingCounter, &limit);
    let (per_min, arrivals) = mix.key(key);
    let mut r = KeyResult {
        per_min,
        ..KeyResult::default()
    };
    admitted.clear();
    for at in arrivals {
        r.requests += 1;
        let fits = |s: &mut State| COUNT_ALL - s.decide(&all, at, 1).remaining <= LIMIT;
        match (fits(&mut exact), fits(&mut approx)) {
            (false, true) => r.wrongly_allowed += 1,
            (true, false) => r.wrongly_limited += 1,
            _ => {}
        }
        if limiter.decide(&limit, at, 1).allowed {
            admitted.push(Charge { at, cost: 1 });
        }
    }
    r.worst_60s = worst_span(admitted, 60 * NS_PER_S);
    r
}

/// Every key of one run, in key order, computed on all cores.
fn run_keys(mix: &KeyMix, progress: &dyn Progress) -> Vec<KeyResult> {
    let next = AtomicU32::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut parts: Vec<(u32, Vec<KeyResult>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    let mut buffer = Vec::new();
                    loop {
                        let from = next.fetch_add(CHUNK, Ordering::Relaxed);
                        if from >= mix.keys {
                            return done;
                        }
                        let to = (from + CHUNK).min(mix.keys);
                        let chunk = (from..to).map(|k| run_key(mix, k, &mut buffer)).collect();
                        progress.advance((to - from) as u64);
                        done.push((from, chunk));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("accuracy worker panicked"))
            .collect()
    });
    parts.sort_by_key(|p| p.0);
    parts.into_iter().flat_map(|p| p.1).collect()
}

/// Runs the study at `config`'s size.
pub fn run(config: &Config, progress: &dyn Progress) -> Scenario {
    let shapes: Vec<ShapeReport> = Shape::ALL
        .into_iter()
        .map(|shape| {
            let runs: Vec<Vec<KeyResult>> = (1..=config.runs)
                .map(|seed| {
                    let mix = KeyMix {
                        keys: config.keys,
                        min_per_min: config.min_per_min,
                        max_per_min: config.max_per_min,
                        duration_s: config.duration_s,
                        shape,
                        seed,
                    };
                    run_keys(&mix, progress)
                })
                .collect();
            findings::summarise(shape, config, &runs)
        })
        .collect();
    let report = AccuracyReport {
        config: *config,
        shapes,
    };
    let checks = findings::checks(&report);
    let charts = vec![findings::chart(&report)];
    let per_run: f64 = report
        .shapes
        .iter()
        .map(|s| s.requests_per_run)
        .sum::<f64>()
        / report.shapes.len() as f64;
    Scenario {
        report: ScenarioReport {
            name: "accuracy",
            title: "how far the sliding counter is from the exact log, on many keys".into(),
            source: "seed 000",
            traffic: format!(
                "limit 100/min; {} keys, each at its own rate drawn uniformly from {:.0} to {:.0} \
                 a minute, for {:.0} s ({:.0} requests a run on average); {} per shape; uniform = Poisson arrivals, bursty = on/off (on a quarter of \
                 the time, spells of {:.0} s on and {:.0} s off on average, at four times the \
                 key's rate, so the same long-run rate).",
                config.keys,
                config.min_per_min,
                config.max_per_min,
                config.duration_s,
                per_run,
                match config.runs {
                    1 => "1 run (seed 1)".to_string(),
                    n => format!("{n} runs (seeds 1 to {n})"),
                },
                Shape::ON_MEAN_S,
                Shape::OFF_MEAN_S,
            ),
            requests: report.shapes.iter().map(|s| s.requests).sum(),
            rows: Vec::new(),
            details: Details::Accuracy(report),
            checks,
            notes: findings::notes(),
            charts: charts.iter().map(|c| c.stem.clone()).collect(),
        },
        charts,
    }
}
