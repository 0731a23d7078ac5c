//! The limiter is the core plus a table: on any multi-key trace, under a
//! fake clock, it makes the core's decisions, decision for decision, whatever
//! sweeps and refunds happen in between.

use std::collections::HashMap;

use proptest::prelude::*;
use tollgate::{Algorithm, Clock, FakeClock, Limit, Limiter, Policy, Quota, State};

#[derive(Clone, Debug)]
enum Op {
    Check { key: u8, cost: u64 },
    Refund { key: u8, cost: u64 },
    Sweep,
}

fn op() -> impl Strategy<Value = (u64, Op)> {
    let op = prop_oneof![
        8 => (0u8..6, 0u64..4).prop_map(|(key, cost)| Op::Check { key, cost }),
        1 => (0u8..6, 1u64..4).prop_map(|(key, cost)| Op::Refund { key, cost }),
        1 => Just(Op::Sweep),
    ];
    (0u64..400, op)
}

/// Small quotas, whose traces reach every case; now and then one so wide
/// that a bucket key no longer fits its compact 16-byte form (a burst of 4
/// to 8 over 2^62 ns), so the limiter's wide tables are checked too.
fn limit() -> impl Strategy<Value = Limit> {
    let small = (1u64..6, 1u64..1_500, 1u64..6)
        .prop_map(|(limit, period, burst)| Quota::with_parts(limit, period, burst).unwrap());
    let wide = (0u64..5, 0u64..1_000, 4u64..8).prop_map(|(limit, period, burst)| {
        Quota::with_parts(Quota::MAX_LIMIT - limit, Quota::MAX_SPAN_NS - period, burst).unwrap()
    });
    (
        prop::sample::select(Algorithm::ALL.to_vec()),
        prop_oneof![4 => small, 1 => wide],
    )
        .prop_map(|(algorithm, quota)| Limit::new(algorithm, quota))
}

fn policy() -> impl Strategy<Value = Policy> {
    prop::collection::vec(limit(), 1..3).prop_map(|limits| Policy::with_limits(limits).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn limiter_decides_as_the_core(policy in policy(), ops in prop::collection::vec(op(), 1..120)) {
        let clock = FakeClock::new();
        let limiter: Limiter<u8, FakeClock> = Limiter::builder(policy.clone())
            .clock(clock.clone())
            .idle_grace(std::time::Duration::ZERO)
            .shards(3)
            .capacity(4)
            .build();
        let limits = policy.limits();
        let fresh = || -> Vec<State> {
            limits.iter().map(|l| State::new(l.algorithm, &l.quota)).collect()
        };
        let mut model: HashMap<u8, Vec<State>> = HashMap::new();
        for (step, op) in ops {
            clock.advance(std::time::Duration::from_nanos(step));
            let now = clock.now();
            match op {
                Op::Check { key, cost } => {
                    let states = model.entry(key).or_insert_with(fresh);
                    let expected = tollgate::decide_all(states, limits, now, cost);
                    prop_assert_eq!(limiter.check_cost(&key, cost), expected, "key {} cost {} at {}", key, cost, now);
                }
                Op::Refund { key, cost } => {
                    let states = model.entry(key).or_insert_with(fresh);
                    for (s, l) in states.iter_mut().zip(limits) {
                        s.refund(&l.quota, now, cost);
                    }
                    limiter.refund(&key, cost);
                }
                Op::Sweep => {
                    limiter.sweep();
                }
            }
        }
    }
}
