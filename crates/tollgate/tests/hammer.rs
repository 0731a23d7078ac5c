//! Many threads on one key never get more than the quota, and several
//! limits on one key are charged together or not at all.

use std::sync::atomic::{AtomicU64, Ordering};

use tollgate::{Algorithm, FakeClock, Limit, Limiter, Policy, Quota};

/// Runs `threads` threads of `checks` checks each on one key; returns the
/// total cost admitted.
fn hammer(
    limiter: &Limiter<String, FakeClock>,
    threads: u64,
    checks: u64,
    cost: impl Fn(u64, u64) -> u64 + Sync,
) -> u64 {
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (admitted, cost) = (&admitted, &cost);
            s.spawn(move || {
                for i in 0..checks {
                    let c = cost(t, i);
                    if limiter.check_cost("hot", c).allowed {
                        admitted.fetch_add(c, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    admitted.into_inner()
}

#[test]
fn eight_threads_on_one_key_admit_exactly_the_capacity() {
    let quota = Quota::per_minute(100).unwrap();
    for algorithm in Algorithm::ALL {
        let clock = FakeClock::at(1_234_567_890);
        let limiter = Limiter::builder(Limit::new(algorithm, quota))
            .clock(clock)
            .build();
        let admitted = hammer(&limiter, 8, 10_000, |_, _| 1);
        // 100 for every algorithm but the queue, which serves one at once
        // and queues `burst` (100) more: the `burst + 1` of docs/SEMANTICS.md.
        let expected = if algorithm == Algorithm::LeakyQueue {
            101
        } else {
            100
        };
        assert_eq!(admitted, expected, "{algorithm}");
        assert_eq!(admitted, quota.capacity(algorithm), "{algorithm}");
    }
}

#[test]
fn threads_spread_over_many_keys_admit_exactly_the_burst_of_each() {
    // The clock never moves, so each key admits its burst and no more,
    // however the threads' checks interleave on shards and keys: the total
    // is keys × burst exactly (a lost or doubled charge would show). Two
    // shards make threads meet on one lock; the default spreads them.
    const KEYS: u64 = 300;
    let quota = Quota::per_minute(100).unwrap().with_burst(7).unwrap();
    for shards in [2, 64] {
        let limiter: Limiter<u64, FakeClock> = Limiter::builder(Limit::new(Algorithm::Gcra, quota))
            .clock(FakeClock::at(42))
            .shards(shards)
            .build();
        let admitted = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (admitted, limiter) = (&admitted, &limiter);
                s.spawn(move || {
                    for i in 0..20 * KEYS {
                        // Each thread walks the keys in its own order.
                        let key = (i * (2 * t + 1) + t * 97) % KEYS;
                        if limiter.check(&key).allowed {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.into_inner(), KEYS * 7, "{shards} shards");
        for key in 0..KEYS {
            assert!(!limiter.check(&key).allowed, "{shards} shards, key {key}");
        }
    }
}

#[test]
fn several_limits_are_charged_together_or_not_at_all() {
    // Two limits of equal capacity: if every admitted request was charged on
    // both and no denied one on either, the key has exactly 60 - admitted
    // left on each, so the most restrictive remaining is exactly that, and
    // draining it admits exactly that much more.
    let per_minute = |alg| Limit::new(alg, Quota::per_minute(60).unwrap());
    for (a, b) in [
        (Algorithm::TokenBucket, Algorithm::FixedWindow),
        (Algorithm::SlidingLog, Algorithm::Gcra),
        (Algorithm::SlidingCounter, Algorithm::LeakyBucket),
    ] {
        let policy = Policy::with_limits(vec![per_minute(a), per_minute(b)]).unwrap();
        let limiter = Limiter::builder(policy).clock(FakeClock::at(7)).build();
        let admitted = hammer(&limiter, 4, 2_000, |t, i| 1 + (t * 7 + i * 13) % 5);
        assert!(admitted <= 60, "{a}+{b}: {admitted}");
        assert_eq!(limiter.peek("hot").remaining, 60 - admitted, "{a}+{b}");
        let mut more = 0;
        while limiter.check("hot").allowed {
            more += 1;
        }
        assert_eq!(admitted + more, 60, "{a}+{b}");
    }
}

#[test]
fn limiters_are_send_and_sync() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Limiter<String>>();
    shareable::<Limiter<u64, FakeClock>>();
    shareable::<tollgate::ConcurrencyLimiter<String>>();
    #[cfg(feature = "async")]
    shareable::<tollgate::Store<tollgate::MemoryBackend>>();
}

#[test]
fn the_real_clock_never_runs_backwards_under_a_key_shared_by_threads() {
    // Far more than two threads can ask for (10^9 a second, with as much
    // burst): a refusal can only come from a key's time seeming to go
    // backwards between two threads, which the limiter would take for a
    // reservation holding the key.
    let quota = Quota::per_second(1_000_000_000).unwrap();
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
    ] {
        let limiter = Limiter::new(Limit::new(algorithm, quota));
        let refused = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..500_000 {
                        if !limiter.check("hot").allowed {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(refused.into_inner(), 0, "{algorithm}");
    }
}
