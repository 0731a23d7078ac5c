//! Refund, force and lease through the keyed `Limiter` and through the
//! `Store` facade over `MemoryBackend`, on a fake clock: the same numbers
//! as the core gives a single key, for one limit and for several.

use std::time::Duration;

use proptest::prelude::*;
use tollgate::{
    decide_all, force_all, lease_all, refund_all, Algorithm, BackendError, Clock, FakeClock, Lease,
    LeaseError, Limit, Limiter, MemoryBackend, OnFull, Policy, Quota, RetryAfter, State, Store,
};

/// One operation on a key, after the clock moved `gap` ns.
#[derive(Clone, Copy, Debug)]
enum Op {
    Check(u64),
    Refund(u64),
    Force(u64),
    Lease(u64),
}

fn op() -> impl Strategy<Value = (u64, Op)> {
    let gap = prop_oneof![Just(0u64), 0u64..50_000_000, 0u64..3_000_000_000];
    let op = prop_oneof![
        3 => (0u64..4).prop_map(Op::Check),
        1 => (0u64..4).prop_map(Op::Refund),
        1 => (0u64..15).prop_map(Op::Force),
        2 => (0u64..8).prop_map(Op::Lease),
    ];
    (gap, op)
}

fn policy() -> impl Strategy<Value = Policy> {
    let limit = (
        prop::sample::select(Algorithm::ALL.to_vec()),
        1u64..=10,
        prop::sample::select(vec![100_000_000u64, 1_000_000_000, 7_000_000_001]),
    )
        .prop_map(|(a, l, p)| Limit::new(a, Quota::new(l, p).unwrap()));
    prop::collection::vec(limit, 1..=2).prop_map(|l| Policy::with_limits(l).unwrap())
}

/// The core's answer on one key's states, as a `Result` like the store's.
fn core(
    states: &mut [State],
    limits: &[Limit],
    now: u64,
    op: Op,
) -> Result<(u64, tollgate::Decision), LeaseError> {
    Ok(match op {
        Op::Check(c) => (c, decide_all(states, limits, now, c)),
        Op::Refund(c) => {
            refund_all(states, limits, now, c);
            (c, tollgate::preview_all(states, limits, now, 0))
        }
        Op::Force(c) => (c, force_all(states, limits, now, c)),
        Op::Lease(max) => {
            let Lease { granted, decision } = lease_all(states, limits, now, max)?;
            (granted, decision)
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Every operation through the limiter and through the store gives the
    /// core's numbers on a single key's states.
    #[test]
    fn limiter_and_store_agree_with_the_core(
        policy in policy(),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let clock = FakeClock::new();
        let limiter: Limiter<String, FakeClock> =
            Limiter::builder(policy.clone()).clock(clock.clone()).build();
        let store = Store::new(policy.clone(), MemoryBackend::with_clock(clock.clone())).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let limits = policy.limits();
        let mut states: Vec<State> = limits.iter().map(|l| State::new(l.algorithm, &l.quota)).collect();
        for (gap, op) in ops {
            clock.advance(Duration::from_nanos(gap));
            let now = clock.now();
            let want = core(&mut states, limits, now, op);
            // The limiter and the store each act on their own copy of the key.
            let by_limiter = match op {
                Op::Check(c) => Ok((c, limiter.check_cost("k", c))),
                Op::Refund(c) => Ok((c, limiter.refund("k", c))),
                Op::Force(c) => Ok((c, limiter.force("k", c))),
                Op::Lease(max) => limiter.lease("k", max).map(|l| (l.granted, l.decision)),
            };
            prop_assert_eq!(&by_limiter, &want, "limiter, {:?} at {}", op, now);
            let by_store = rt.block_on(async {
                match op {
                    Op::Check(c) => store.check_cost("k", c).await.map(|d| (c, d)),
                    Op::Refund(c) => store.refund("k", c).await.map(|d| (c, d)),
                    Op::Force(c) => store.force("k", c).await.map(|d| (c, d)),
                    Op::Lease(max) => store.lease("k", max).await.map(|l| (l.granted, l.decision)),
                }
            });
            match (&by_store, &want) {
                (Ok(got), Ok(want)) => prop_assert_eq!(got, want, "store, {:?} at {}", op, now),
                (Err(BackendError::UnsupportedPolicy(m)), Err(_)) => {
                    prop_assert!(m.contains("sliding_log cannot lease"), "{}", m)
                }
                _ => prop_assert!(false, "store {:?} vs core {:?}", by_store, want),
            }
        }
    }
}

fn gcra(per_second: u64) -> Limit {
    Limit::new(Algorithm::Gcra, Quota::per_second(per_second).unwrap())
}

#[test]
fn forced_debt_blocks_until_repaid_on_the_clock() {
    let clock = FakeClock::new();
    let limiter = Limiter::builder(gcra(10)).clock(clock.clone()).build();
    let after = limiter.force("llm", 30);
    assert!(after.allowed);
    assert_eq!(after.remaining, 0);
    // 20 units beyond the burst of 10, then one more: 2.1 s.
    let denied = limiter.check("llm");
    assert_eq!(denied.retry_after, RetryAfter::After(2_100_000_000));
    clock.advance(Duration::from_nanos(2_099_999_999));
    assert!(!limiter.check("llm").allowed);
    clock.advance(Duration::from_nanos(1));
    assert!(limiter.check("llm").allowed);
}

#[test]
fn a_lease_takes_what_is_left_and_a_refund_gives_back_the_unused() {
    let clock = FakeClock::new();
    let limiter = Limiter::builder(gcra(10)).clock(clock.clone()).build();
    assert!(limiter.check_cost("k", 4).allowed);
    let lease = limiter.lease("k", 100).unwrap();
    assert_eq!(lease.granted, 6);
    assert_eq!(lease.decision.remaining, 0);
    let none = limiter.lease("k", 100).unwrap();
    assert_eq!(none.granted, 0);
    assert_eq!(none.decision.retry_after, RetryAfter::After(100_000_000));
    // Two of the six went unused.
    assert_eq!(limiter.refund("k", 2).remaining, 2);
}

#[test]
fn a_sliding_log_policy_refuses_leases() {
    let limiter: Limiter<String> = Limiter::new(
        Policy::with_limits(vec![
            gcra(5),
            Limit::new(Algorithm::SlidingLog, Quota::per_second(5).unwrap()),
        ])
        .unwrap(),
    );
    assert_eq!(
        limiter.lease("k", 3),
        Err(LeaseError::NotLeasable(Algorithm::SlidingLog))
    );
    assert!(limiter.is_empty(), "a refused lease stored a key");
}

#[test]
fn a_reservation_holds_leases_back() {
    let clock = FakeClock::new();
    let limiter = Limiter::builder(
        gcra(10)
            .quota
            .with_burst(1)
            .map(|q| Limit::new(Algorithm::Gcra, q))
            .unwrap(),
    )
    .clock(clock.clone())
    .build();
    assert!(limiter.check("k").allowed);
    let reserved = limiter.reserve("k", 1, Duration::from_secs(1)).unwrap();
    assert_eq!(reserved.wait(), Duration::from_millis(100));
    let lease = limiter.lease("k", 5).unwrap();
    assert_eq!(lease.granted, 0);
    assert!(!lease.decision.allowed);
    assert_eq!(lease.decision.retry_after, RetryAfter::After(200_000_000));
}

#[test]
fn a_full_limiter_under_reject_charges_no_new_key() {
    let limiter = Limiter::builder(gcra(10))
        .max_keys(1)
        .on_full(OnFull::Reject)
        .clock(FakeClock::new())
        .build();
    assert!(limiter.force("a", 1).allowed);
    assert!(!limiter.force("b", 1).allowed);
    assert_eq!(limiter.lease("b", 3).unwrap().granted, 0);
    assert_eq!(limiter.len(), 1);
}
