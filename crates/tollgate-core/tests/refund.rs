//! `refund`: the inverse of a charge, exact when it undoes one, and capped so
//! no key ever gets more room than a fresh key.

use proptest::prelude::*;
use tollgate_core::{Algorithm, Quota, State};

fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop::sample::select(Algorithm::ALL.to_vec())
}

fn quota() -> impl Strategy<Value = Quota> {
    (1u64..8, 1u64..2_000, 1u64..8)
        .prop_map(|(limit, period, burst)| Quota::with_parts(limit, period, burst).unwrap())
}

/// A trace of (time step, cost) requests.
fn trace() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..700, 0u64..4), 0..40)
}

/// Every cost's preview at `now`: the key's whole observable state then.
fn previews(state: &State, quota: &Quota, now: u64) -> Vec<tollgate_core::Decision> {
    (0..=quota.capacity(state.algorithm()) + 1)
        .map(|cost| state.preview(quota, now, cost))
        .collect()
}

/// Plays `trace`; returns the state and the time of the last request.
fn play(algorithm: Algorithm, quota: &Quota, trace: &[(u64, u64)]) -> (State, u64) {
    let mut state = State::new(algorithm, quota);
    let mut now = 0;
    for &(step, cost) in trace {
        now += step;
        state.decide(quota, now, cost);
    }
    (state, now)
}

proptest! {
    #[test]
    fn refunding_an_admitted_charge_undoes_it(
        algorithm in algorithm(), quota in quota(), trace in trace(),
        step in 0u64..700, cost in 1u64..4,
    ) {
        let (mut state, now) = play(algorithm, &quota, &trace);
        let now = now + step;
        let before = previews(&state, &quota, now);
        if state.decide(&quota, now, cost).allowed {
            state.refund(&quota, now, cost);
            prop_assert_eq!(previews(&state, &quota, now), before);
        }
    }

    #[test]
    fn a_refund_never_gives_more_room_than_a_fresh_key(
        algorithm in algorithm(), quota in quota(), trace in trace(),
        step in 0u64..700, refund in 0u64..20,
    ) {
        let (mut state, now) = play(algorithm, &quota, &trace);
        let now = now + step;
        state.refund(&quota, now, refund);
        let capacity = quota.capacity(algorithm);
        for cost in 0..=capacity + 1 {
            let d = state.preview(&quota, now, cost);
            prop_assert!(d.remaining <= capacity);
            // What a fresh key refuses, a refunded key refuses too.
            let fresh = State::new(algorithm, &quota).preview(&quota, now, cost);
            prop_assert!(d.allowed <= fresh.allowed);
        }
        // A refund of everything leaves the key as good as fresh.
        state.refund(&quota, now, u64::MAX);
        let fresh = State::new(algorithm, &quota);
        prop_assert_eq!(
            previews(&state, &quota, now).iter().map(|d| (d.allowed, d.remaining)).collect::<Vec<_>>(),
            previews(&fresh, &quota, now).iter().map(|d| (d.allowed, d.remaining)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_refund_moves_the_key_clock_forward_only(
        algorithm in algorithm(), quota in quota(), trace in trace(), back in 0u64..700,
    ) {
        let (mut state, now) = play(algorithm, &quota, &trace);
        let last = state.last_update();
        prop_assert!(last <= now);
        state.refund(&quota, last.saturating_sub(back), 1);
        prop_assert_eq!(state.last_update(), last);
    }
}

#[test]
fn gcra_refund_gives_back_emission_intervals() {
    // 10 per 1000 ns: T = 100 ns; burst 3.
    let quota = Quota::with_parts(10, 1000, 3).unwrap();
    let mut key = State::new(Algorithm::Gcra, &quota);
    for _ in 0..3 {
        assert!(key.decide(&quota, 0, 1).allowed);
    }
    assert!(!key.decide(&quota, 0, 1).allowed);
    key.refund(&quota, 0, 2);
    assert_eq!(key.preview(&quota, 0, 0).remaining, 2);
    assert_eq!(key.preview(&quota, 0, 0).reset_after, 100);
}

#[test]
fn fixed_window_refund_takes_from_the_current_window_only() {
    let quota = Quota::new(5, 100).unwrap();
    let mut key = State::new(Algorithm::FixedWindow, &quota);
    assert!(key.decide(&quota, 10, 5).allowed);
    assert!(key.decide(&quota, 110, 5).allowed);
    // Only window 1's own charges can be given back in window 1.
    key.refund(&quota, 120, 3);
    assert_eq!(key.preview(&quota, 120, 0).remaining, 3);
    key.refund(&quota, 210, 5);
    assert_eq!(key.preview(&quota, 210, 0).remaining, 5);
}
