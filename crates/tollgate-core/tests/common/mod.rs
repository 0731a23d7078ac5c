//! Shared by the property tests: random quotas and traces, a driver that
//! tracks each key's effective clock, exact rational arithmetic and
//! independent reference models of every algorithm written from `docs/SEMANTICS.md`.
//!
//! Each test binary uses a different subset of these helpers, so unused ones
//! are expected per binary.
#![allow(dead_code)]

pub mod models;
pub mod ratio;

use proptest::prelude::*;
use tollgate_core::{Algorithm, Decision, Quota, State};

/// One day in nanoseconds.
pub const DAY: u64 = 86_400_000_000_000;
/// The longest period the documented range must cover.
pub const MAX_PERIOD: u64 = 366 * DAY;
/// The largest limit and burst the documented range must cover.
pub const MAX_LIMIT: u64 = 1_000_000_000;

/// Limits from 1 to 10^9, mostly small so that traces reach the limit.
pub fn limit() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 1u64..=10,
        3 => 11u64..=1_000,
        1 => 1_001u64..=MAX_LIMIT,
        1 => Just(MAX_LIMIT),
    ]
}

/// Periods from 1 ns to 366 days, with the awkward ones (primes, one ns,
/// the longest) drawn often.
pub fn period() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => 1u64..=100,
        2 => 101u64..=10_000_000,
        3 => prop::sample::select(vec![
            1,
            2,
            3,
            7,
            1_000,
            999_999_937,
            1_000_000_000,
            60_000_000_000,
            3_600_000_000_000,
            DAY,
            MAX_PERIOD,
        ]),
        1 => 1u64..=MAX_PERIOD,
    ]
}

/// A burst relative to the limit: equal (the default), none, small, a
/// multiple or a fraction of it, or anything in range.
pub fn burst_for(limit: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => Just(limit),
        1 => Just(0),
        2 => 1u64..=10,
        2 => (1u64..=16).prop_map(move |k| (limit * k / 4).clamp(1, MAX_LIMIT)),
        1 => 1u64..=MAX_LIMIT,
    ]
}

/// A valid quota in the documented range.
pub fn quota() -> impl Strategy<Value = Quota> {
    (limit(), period())
        .prop_flat_map(|(l, p)| (Just(l), Just(p), burst_for(l)))
        .prop_filter_map("refill longer than supported", |(l, p, b)| {
            Quota::with_parts(l, p, b).ok()
        })
}

/// A valid quota anywhere in the range `Quota` accepts, extremes included.
pub fn any_quota() -> impl Strategy<Value = Quota> {
    let edge = |max: u64| prop_oneof![1u64..=10, Just(max), (max - 10)..=max, 1u64..=max,];
    (
        edge(Quota::MAX_LIMIT),
        edge(Quota::MAX_SPAN_NS),
        prop_oneof![1 => Just(0), 9 => edge(Quota::MAX_LIMIT)],
    )
        .prop_filter_map("refill longer than supported", |(l, p, b)| {
            Quota::with_parts(l, p, b).ok()
        })
}

/// How far the clock moves before a request, resolved against the quota.
#[derive(Clone, Copy, Debug)]
pub enum Gap {
    /// The same instant.
    Same,
    /// A few nanoseconds.
    Tiny(u64),
    /// `k / 1000` of an emission interval `period / limit`.
    Emission(u64),
    /// `k / 1000` of a period.
    Period(u64),
    /// Anything (saturating at the end of time).
    Huge(u64),
    /// Backwards by `k / 1000` of a period (a clock regression).
    BackPeriod(u64),
    /// Backwards by a few nanoseconds.
    BackTiny(u64),
}

/// A request's cost, resolved against the quota.
#[derive(Clone, Copy, Debug)]
pub enum Cost {
    /// A peek.
    Zero,
    /// A few units.
    Few(u64),
    /// `limit + d - 2`, saturating at 0.
    NearLimit(u64),
    /// `burst + d - 2`, saturating at 0.
    NearBurst(u64),
    /// `k / 1000` of `max(limit, burst)`.
    Share(u64),
    /// Anything up to `u64::MAX`.
    Huge(u64),
}

/// Where a trace starts.
#[derive(Clone, Copy, Debug)]
pub enum Start {
    /// Time 0.
    Zero,
    /// Somewhere in the first 2^40 ns.
    Early(u64),
    /// Within 2^40 ns of `u64::MAX`.
    Late(u64),
}

fn gap_forward() -> impl Strategy<Value = Gap> {
    prop_oneof![
        3 => Just(Gap::Same),
        1 => (1u64..=3).prop_map(Gap::Tiny),
        4 => (0u64..=3_000).prop_map(Gap::Emission),
        3 => (0u64..=2_500).prop_map(Gap::Period),
        1 => any::<u64>().prop_map(Gap::Huge),
    ]
}

fn gap_any() -> impl Strategy<Value = Gap> {
    prop_oneof![
        8 => gap_forward(),
        1 => (0u64..=1_500).prop_map(Gap::BackPeriod),
        1 => (1u64..=3).prop_map(Gap::BackTiny),
    ]
}

fn cost() -> impl Strategy<Value = Cost> {
    prop_oneof![
        2 => Just(Cost::Zero),
        8 => (1u64..=3).prop_map(Cost::Few),
        2 => (0u64..=4).prop_map(Cost::NearLimit),
        2 => (0u64..=4).prop_map(Cost::NearBurst),
        2 => (0u64..=1_000).prop_map(Cost::Share),
        1 => prop_oneof![any::<u64>(), Just(u64::MAX)].prop_map(Cost::Huge),
    ]
}

fn start() -> impl Strategy<Value = Start> {
    prop_oneof![
        4 => Just(Start::Zero),
        2 => (0u64..1 << 40).prop_map(Start::Early),
        1 => (0u64..1 << 40).prop_map(Start::Late),
    ]
}

/// A trace's shape, turned into times and costs by [`Shape::resolve`].
#[derive(Clone, Debug)]
pub struct Shape {
    start: Start,
    steps: Vec<(Gap, Cost)>,
}

/// Trace shapes whose clock never runs backwards.
pub fn monotone_shape(max_len: usize) -> impl Strategy<Value = Shape> {
    (
        start(),
        prop::collection::vec((gap_forward(), cost()), 1..=max_len),
    )
        .prop_map(|(start, steps)| Shape { start, steps })
}

/// Trace shapes with occasional clock regressions.
pub fn shape(max_len: usize) -> impl Strategy<Value = Shape> {
    (
        start(),
        prop::collection::vec((gap_any(), cost()), 1..=max_len),
    )
        .prop_map(|(start, steps)| Shape { start, steps })
}

fn share(value: u64, per_mille: u64) -> u64 {
    (value as u128 * per_mille as u128 / 1000) as u64
}

impl Shape {
    /// The `(t_ns, cost)` requests of this shape under `quota`.
    pub fn resolve(&self, quota: &Quota) -> Vec<(u64, u64)> {
        let (limit, period, burst) = (quota.limit(), quota.period_ns(), quota.burst());
        let mut now = match self.start {
            Start::Zero => 0,
            Start::Early(t) => t,
            Start::Late(t) => u64::MAX - t,
        };
        self.steps
            .iter()
            .map(|&(gap, cost)| {
                now = match gap {
                    Gap::Same => now,
                    Gap::Tiny(k) => now.saturating_add(k),
                    Gap::Emission(k) => {
                        let d = period as u128 * k as u128 / (1000 * limit as u128);
                        now.saturating_add(d as u64)
                    }
                    Gap::Period(k) => now.saturating_add(share(period, k)),
                    Gap::Huge(d) => now.saturating_add(d),
                    Gap::BackPeriod(k) => now.saturating_sub(share(period, k)),
                    Gap::BackTiny(k) => now.saturating_sub(k),
                };
                let cost = match cost {
                    Cost::Zero => 0,
                    Cost::Few(c) => c,
                    Cost::NearLimit(d) => (limit + d).saturating_sub(2),
                    Cost::NearBurst(d) => (burst + d).saturating_sub(2),
                    Cost::Share(k) => share(limit.max(burst), k),
                    Cost::Huge(c) => c,
                };
                (now, cost)
            })
            .collect()
    }
}

/// A key driven through the core, tracking the time of its last charge so
/// tests know the instant each request is judged at.
#[derive(Clone, Debug)]
pub struct Key {
    /// The core's state.
    pub state: State,
    /// The time of the last charge (0 for a fresh key).
    pub last: u64,
}

impl Key {
    /// A fresh key.
    pub fn new(algorithm: Algorithm, quota: &Quota) -> Self {
        Key {
            state: State::new(algorithm, quota),
            last: 0,
        }
    }

    /// The instant a request at `now` is judged at.
    pub fn effective(&self, now: u64) -> u64 {
        now.max(self.last)
    }

    /// Decides through the core; returns the effective time and the decision.
    pub fn decide(&mut self, quota: &Quota, now: u64, cost: u64) -> (u64, Decision) {
        let at = self.effective(now);
        let decision = self.state.decide(quota, now, cost);
        if decision.allowed && cost > 0 {
            self.last = at;
        }
        (at, decision)
    }
}

/// The admitted `(effective time, cost)` requests of `trace` on a fresh key.
pub fn admitted(algorithm: Algorithm, quota: &Quota, trace: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut key = Key::new(algorithm, quota);
    trace
        .iter()
        .filter_map(|&(t, c)| {
            let (at, d) = key.decide(quota, t, c);
            (d.allowed && c > 0).then_some((at, c))
        })
        .collect()
}

/// Every algorithm's decisions on `trace`, each from a fresh key.
pub fn replay(algorithm: Algorithm, quota: &Quota, trace: &[(u64, u64)]) -> Vec<Decision> {
    let mut state = State::new(algorithm, quota);
    trace
        .iter()
        .map(|&(t, c)| state.decide(quota, t, c))
        .collect()
}

/// Any algorithm.
pub fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop::sample::select(Algorithm::ALL.to_vec())
}
