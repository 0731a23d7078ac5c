//! Decisions are a pure function of (quota, request sequence): replays are
//! identical, `preview` is `decide` without the charge, denials and peeks
//! change nothing, and a late request is judged at the key's last charge.
//! Nothing panics for any time or cost.

mod common;

use common::{algorithm, any_quota, monotone_shape, quota, replay, shape, Key};
use proptest::prelude::*;
use tollgate_core::{Algorithm, Quota, State};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn replaying_twice_gives_identical_decisions(
        algorithm in algorithm(),
        quota in quota(),
        shape in shape(40),
    ) {
        let trace = shape.resolve(&quota);
        prop_assert_eq!(replay(algorithm, &quota, &trace), replay(algorithm, &quota, &trace));
    }

    #[test]
    fn preview_is_decide_and_only_charges_change_state(
        algorithm in algorithm(),
        quota in quota(),
        shape in shape(40),
    ) {
        let mut state = State::new(algorithm, &quota);
        for (t, c) in shape.resolve(&quota) {
            let before = state.clone();
            let previewed = state.preview(&quota, t, c);
            prop_assert_eq!(&state, &before, "preview changed the state");
            let decided = state.decide(&quota, t, c);
            prop_assert_eq!(previewed, decided);
            if c == 0 {
                prop_assert!(decided.allowed, "peek denied at {}", t);
            }
            if !decided.allowed || c == 0 {
                prop_assert_eq!(&state, &before, "a denial or peek changed the state");
            }
        }
    }

    /// A request earlier than the key's last charge decides, and leaves the
    /// state, exactly as if it had arrived at that charge's time.
    #[test]
    fn late_requests_are_judged_at_the_last_charge(
        algorithm in algorithm(),
        quota in quota(),
        shape in shape(40),
    ) {
        let mut key = Key::new(algorithm, &quota);
        for (t, c) in shape.resolve(&quota) {
            if t < key.last {
                let (mut late, mut on_time) = (key.state.clone(), key.state.clone());
                prop_assert_eq!(late.decide(&quota, t, c), on_time.decide(&quota, key.last, c));
                prop_assert_eq!(late, on_time);
            }
            key.decide(&quota, t, c);
        }
    }

    /// Peeks slipped in between the requests of a trace, at past or
    /// present instants, change none of its decisions.
    #[test]
    fn peeks_in_between_change_no_decision(
        algorithm in algorithm(),
        quota in quota(),
        shape in monotone_shape(30),
        peeks in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
    ) {
        let trace = shape.resolve(&quota);
        let mut plain = State::new(algorithm, &quota);
        let mut noisy = State::new(algorithm, &quota);
        for (i, &(t, c)) in trace.iter().enumerate() {
            for p in &peeks {
                let (past, _) = trace[p.index(i + 1)];
                noisy.decide(&quota, past, 0);
            }
            prop_assert_eq!(plain.decide(&quota, t, c), noisy.decide(&quota, t, c));
        }
    }

    #[test]
    fn nothing_panics_anywhere_in_range(
        algorithm in algorithm(),
        quota in any_quota(),
        shape in shape(30),
    ) {
        let mut state = State::new(algorithm, &quota);
        for (t, c) in shape.resolve(&quota) {
            state.preview(&quota, t, c);
            state.decide(&quota, t, c);
            state.is_idle(&quota, t);
            prop_assert!(state.memory_bytes() >= 16);
        }
    }
}

/// Every algorithm at the edges of time, cost and quota, in every order of
/// a few extreme instants: no panic, and peeks still admitted.
#[test]
fn extremes_do_not_panic() {
    let quotas = [
        Quota::new(1, 1).unwrap(),
        Quota::new(Quota::MAX_LIMIT, 1).unwrap(),
        Quota::new(1, Quota::MAX_SPAN_NS).unwrap(),
        Quota::new(Quota::MAX_LIMIT, Quota::MAX_SPAN_NS).unwrap(),
        Quota::with_parts(Quota::MAX_LIMIT, Quota::MAX_SPAN_NS, 1).unwrap(),
        Quota::with_parts(1, 1, Quota::MAX_LIMIT).unwrap(),
    ];
    let times = [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX];
    let costs = [
        0,
        1,
        Quota::MAX_LIMIT,
        Quota::MAX_LIMIT + 1,
        u64::MAX - 1,
        u64::MAX,
    ];
    for quota in &quotas {
        for algorithm in Algorithm::ALL {
            for first in times {
                for second in times {
                    for cost in costs {
                        let mut state = State::new(algorithm, quota);
                        for t in [first, second, first] {
                            state.decide(quota, t, quota.capacity(algorithm).min(cost));
                            assert!(state.decide(quota, t, 0).allowed);
                            state.decide(quota, t, cost);
                            state.is_idle(quota, t);
                        }
                    }
                }
            }
        }
    }
}
