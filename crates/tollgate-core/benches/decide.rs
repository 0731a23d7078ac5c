//! One decision on a hot key, per algorithm, at 100 per minute (burst 100).
//!
//! The clock advances by a fixed step per decision: one emission interval
//! (600 ms) keeps the key admitting, one microsecond keeps it denying once
//! the burst is spent. Each algorithm is measured through its concrete state
//! type and through the run-time `State` enum.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate_core::algorithms::{
    FixedWindow, Gcra, LeakyBucket, LeakyQueue, SlidingCounter, SlidingLog, TokenBucket,
};
use tollgate_core::{Algorithm, AlgorithmState, Quota, State};

/// Admitting: one request per emission interval.
const ADMIT_STEP: u64 = 600_000_000;
/// Denying: a microsecond refills 1/600000 of a request.
const DENY_STEP: u64 = 1_000;

fn quota() -> Quota {
    Quota::per_minute(100).unwrap()
}

/// Measures `decide` on a key that is first warmed with `step`-spaced requests.
fn bench_one<S: AlgorithmState>(c: &mut Criterion, name: &str, mut state: S, step: u64) {
    let quota = quota();
    let mut now = 0u64;
    for _ in 0..1_000 {
        now += step;
        state.decide(&quota, now, 1);
    }
    c.bench_function(name, |b| {
        b.iter(|| {
            now += step;
            black_box(state.decide(black_box(&quota), now, black_box(1)))
        })
    });
}

fn concrete(c: &mut Criterion) {
    let q = quota();
    bench_one(c, "concrete/fixed_window", FixedWindow::new(&q), ADMIT_STEP);
    bench_one(c, "concrete/sliding_log", SlidingLog::new(&q), ADMIT_STEP);
    bench_one(c, "concrete/sliding_counter", SlidingCounter::new(&q), ADMIT_STEP);
    bench_one(c, "concrete/token_bucket/admit", TokenBucket::new(&q), ADMIT_STEP);
    bench_one(c, "concrete/token_bucket/deny", TokenBucket::new(&q), DENY_STEP);
    bench_one(c, "concrete/gcra/admit", Gcra::new(&q), ADMIT_STEP);
    bench_one(c, "concrete/gcra/deny", Gcra::new(&q), DENY_STEP);
    bench_one(c, "concrete/leaky_bucket", LeakyBucket::new(&q), ADMIT_STEP);
    bench_one(c, "concrete/leaky_queue", LeakyQueue::new(&q), ADMIT_STEP);
}

/// `State` is not an `AlgorithmState`; a thin adapter keeps one bench loop.
struct Dynamic(State);

impl AlgorithmState for Dynamic {
    fn new(_quota: &Quota) -> Self {
        unreachable!("built with State::new")
    }
    fn preview(&self, quota: &Quota, now: u64, cost: u64) -> tollgate_core::Decision {
        self.0.preview(quota, now, cost)
    }
    #[inline]
    fn decide(&mut self, quota: &Quota, now: u64, cost: u64) -> tollgate_core::Decision {
        self.0.decide(quota, now, cost)
    }
}

fn dynamic(c: &mut Criterion) {
    let q = quota();
    for algorithm in Algorithm::ALL {
        let state = || Dynamic(State::new(algorithm, &q));
        let name = algorithm.name();
        if matches!(algorithm, Algorithm::TokenBucket | Algorithm::Gcra) {
            bench_one(c, &format!("state/{name}/admit"), state(), ADMIT_STEP);
            bench_one(c, &format!("state/{name}/deny"), state(), DENY_STEP);
        } else {
            bench_one(c, &format!("state/{name}"), state(), ADMIT_STEP);
        }
    }
}

criterion_group!(benches, concrete, dynamic);
criterion_main!(benches);
