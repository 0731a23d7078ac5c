//! Memory stays bounded: the sweep drops idle keys and nothing else, and
//! `max_keys` holds under a flood of new keys.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use tollgate::{Algorithm, FakeClock, Limit, Limiter, LimiterFull, OnFull, Quota, RetryAfter};

fn limit(algorithm: Algorithm) -> Limit {
    Limit::new(algorithm, Quota::per_second(10).unwrap())
}

const SECOND: u64 = 1_000_000_000;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Keys charged at random times; a sweep at a random later time must
    /// drop exactly the keys the core calls idle, and leave every other
    /// key's numbers unchanged.
    #[test]
    fn sweep_drops_idle_keys_and_nothing_else(
        algorithm in prop::sample::select(Algorithm::ALL.to_vec()),
        charges in prop::collection::vec((0u64..3 * SECOND, 0u16..200, 1u64..4), 1..200),
        later in 0u64..3 * SECOND,
    ) {
        let mut charges = charges;
        charges.sort();
        let clock = FakeClock::new();
        let limiter = Limiter::builder(limit(algorithm))
            .clock(clock.clone())
            .idle_grace(Duration::ZERO)
            .build();
        for &(at, key, cost) in &charges {
            clock.set(at);
            limiter.check_cost(&key, cost);
        }
        clock.advance(Duration::from_nanos(later));
        let keys: std::collections::BTreeSet<u16> = charges.iter().map(|c| c.1).collect();
        let before: Vec<_> = keys.iter().map(|k| limiter.peek(k)).collect();
        let fresh = limiter.peek(&u16::MAX);
        let busy = before.iter().filter(|d| d.reset_after > 0).count();
        let removed = limiter.sweep();
        prop_assert_eq!(limiter.len(), busy);
        prop_assert!(removed <= keys.len());
        let after: Vec<_> = keys.iter().map(|k| limiter.peek(k)).collect();
        prop_assert_eq!(&after, &before);
        for d in before.iter().filter(|d| d.reset_after == 0) {
            prop_assert_eq!(d, &fresh);
        }
    }
}

#[test]
fn sweep_keeps_keys_idle_for_less_than_the_grace() {
    let clock = FakeClock::new();
    let limiter = Limiter::builder(limit(Algorithm::Gcra))
        .clock(clock.clone())
        .idle_grace(Duration::from_secs(5))
        .build();
    limiter.check("a");
    clock.advance(Duration::from_secs(3));
    limiter.check("b");
    // "a" is idle from 0.1 s on, "b" from 3.1 s on.
    clock.advance(Duration::from_secs(3));
    assert_eq!(limiter.sweep(), 1, "a: idle for 5.9 s; b: 2.9 s");
    assert_eq!(limiter.len(), 1);
    clock.advance(Duration::from_secs(2));
    assert_eq!(limiter.sweep(), 0, "b: idle for 4.9 s");
    clock.advance(Duration::from_millis(200));
    let mut removed = 0;
    for _ in 0..64 {
        removed += limiter.sweep_step(1 << 20);
    }
    assert_eq!(removed, 1);
    assert!(limiter.is_empty());
}

#[test]
fn peeks_and_denials_of_new_keys_store_nothing() {
    let limiter: Limiter<String> = Limiter::new(limit(Algorithm::SlidingLog));
    limiter.peek("ghost");
    assert_eq!(
        limiter.check_cost("giant", 11).retry_after,
        RetryAfter::Never
    );
    assert!(limiter.is_empty());
}

/// Floods a bounded limiter with new keys from two threads; returns how many
/// were refused for want of room.
fn flood(limiter: &Limiter<u64, FakeClock>, keys_per_thread: u64) -> u64 {
    let refused = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let refused = &refused;
            s.spawn(move || {
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ t;
                for _ in 0..keys_per_thread {
                    // xorshift: random keys, as an attacker would send.
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if limiter.try_check(&x) == Err(LimiterFull { max_keys: 1_000 }) {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    assert!(limiter.len() <= 1_000);
                }
            });
        }
    });
    refused.into_inner()
}

#[test]
fn max_keys_holds_under_a_flood_of_new_keys() {
    let clock = FakeClock::new();
    let limiter = Limiter::builder(limit(Algorithm::TokenBucket))
        .clock(clock.clone())
        .max_keys(1_000)
        .on_full(OnFull::Reject)
        .build();
    // No key is ever idle on a frozen clock: past 1,000 keys, every new one
    // is refused, and known keys are still limited.
    let refused = flood(&limiter, 10_000);
    assert_eq!(limiter.len(), 1_000);
    assert_eq!(refused, 20_000 - 1_000);
    assert!(!limiter.check(&12345u64).allowed, "refused, with a denial");
    // Once keys are idle, new keys evict them.
    clock.advance(Duration::from_secs(1));
    let refused = flood(&limiter, 10_000);
    assert!(limiter.len() <= 1_000);
    assert!(refused < 20_000, "idle keys were evicted for new ones");
}

#[test]
fn admit_untracked_decides_new_keys_as_fresh_without_storing_them() {
    let clock = FakeClock::new();
    let limiter = Limiter::builder(limit(Algorithm::FixedWindow))
        .clock(clock)
        .max_keys(1)
        .on_full(OnFull::AdmitUntracked)
        .build();
    assert!(limiter.check_cost("known", 10).allowed);
    assert!(!limiter.check("known").allowed);
    for _ in 0..3 {
        let d = limiter.check_cost("stranger", 10);
        assert!(d.allowed);
        assert_eq!(d.remaining, 0);
    }
    assert_eq!(limiter.len(), 1);
}

/// The default under a flood: the keys left out share one budget, so a
/// brand-new user during an attack is limited (here, by the attack's own
/// spending), never let through unlimited.
#[test]
fn by_default_keys_left_out_share_one_budget() {
    let clock = FakeClock::new();
    let quota = Quota::per_minute(100).unwrap();
    let limiter = Limiter::builder(Limit::new(Algorithm::Gcra, quota))
        .clock(clock.clone())
        .max_keys(1_000)
        .build();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut admitted = 0;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        admitted += u32::from(limiter.check(&x).allowed);
    }
    // 1,000 keys tracked, each admitted once; the other 19,000 share 100.
    assert_eq!(limiter.len(), 1_000);
    assert_eq!(admitted, 1_000 + 100);
    let newcomer = (0..200).filter(|_| limiter.check(&7u64).allowed).count();
    assert_eq!(newcomer, 0, "the flood spent the shared budget");
    // Once the flood's keys are idle, a newcomer evicts one and has its own
    // budget again.
    clock.advance(Duration::from_secs(60));
    let newcomer = (0..200).filter(|_| limiter.check(&7u64).allowed).count();
    assert_eq!(newcomer, 100);
}
