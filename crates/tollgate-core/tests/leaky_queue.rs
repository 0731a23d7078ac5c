//! The shaper (nginx `limit_req` with `burst`, no `nodelay`): releases are an
//! emission interval apart, no wait exceeds `burst * T`, and a burst on a
//! fresh key is served one at once and `burst` more queued.

mod common;

use common::{quota, shape, Key};
use proptest::prelude::*;
use tollgate_core::{Algorithm, Quota, RetryAfter, State};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// With no queue (burst 0, nginx's default) the shaper serves a request
    /// only when the drain is free, which is GCRA with a burst of one: the
    /// same decisions and numbers, only the reported capacity differs
    /// (`burst + 1` against `burst`, both 1).
    #[test]
    fn no_queue_is_gcra_with_a_burst_of_one(quota in quota(), shape in shape(60)) {
        let queue_quota = quota.with_burst(0).unwrap();
        let gcra_quota = quota.with_burst(1).unwrap();
        let mut queue = State::new(Algorithm::LeakyQueue, &queue_quota);
        let mut gcra = State::new(Algorithm::Gcra, &gcra_quota);
        for (t, c) in shape.resolve(&quota) {
            let q = queue.decide(&queue_quota, t, c);
            prop_assert_eq!(q, gcra.decide(&gcra_quota, t, c), "at {} cost {}", t, c);
            prop_assert_eq!(q.delay, 0);
        }
    }

    /// Each admitted request of cost `c` holds the drain for `c * T`: the
    /// next release comes no sooner, up to the rounding of release times up
    /// to whole ns (less than 1 ns, i.e. `limit` ticks of `1/limit` ns).
    #[test]
    fn releases_are_spaced_and_waits_bounded(quota in quota(), shape in shape(60)) {
        let (limit, period) = (quota.limit() as u128, quota.period_ns() as u128);
        let longest = (quota.burst() as u128 * period).div_ceil(limit);
        let mut key = Key::new(Algorithm::LeakyQueue, &quota);
        let mut previous: Option<(u128, u64)> = None;
        for (t, c) in shape.resolve(&quota) {
            let (at, d) = key.decide(&quota, t, c);
            if !d.allowed || c == 0 {
                prop_assert_eq!(d.delay, 0);
                continue;
            }
            prop_assert!(d.delay as u128 <= longest, "waited {} > burst*T {}", d.delay, longest);
            let release = at as u128 + d.delay as u128;
            if let Some((before, cost)) = previous {
                prop_assert!(release >= before);
                prop_assert!(
                    (release - before) * limit + limit > cost as u128 * period,
                    "released {} ns after a request of cost {}", release - before, cost
                );
            }
            previous = Some((release, c));
        }
    }

    /// On a fresh key, `n` unit requests at one instant: `burst + 1` are
    /// admitted, the k-th waiting `ceil(k * T)`; the rest wait for the
    /// first queued slot to drain.
    #[test]
    fn a_burst_at_one_instant_queues_burst_requests(quota in quota(), at in 0u64..1 << 50) {
        let burst = quota.burst().min(300);
        let quota = Quota::with_parts(quota.limit(), quota.period_ns(), burst).unwrap();
        let (limit, period) = (quota.limit() as u128, quota.period_ns() as u128);
        let mut state = State::new(Algorithm::LeakyQueue, &quota);
        for k in 0..=burst as u128 {
            let d = state.decide(&quota, at, 1);
            prop_assert!(d.allowed);
            prop_assert_eq!(d.delay as u128, (k * period).div_ceil(limit));
        }
        let d = state.decide(&quota, at, 1);
        prop_assert!(!d.allowed);
        // The first slot frees after one T: then one more wait of burst*T fits.
        prop_assert_eq!(d.retry_after, RetryAfter::After(period.div_ceil(limit) as u64));
    }
}

/// nginx's documented example: `rate=100r/m burst=20` takes 1 + 20 requests
/// at once; the 21st waits 20 * 600 ms = 12 s; a cost of 22 can never fit.
#[test]
fn nginx_burst_example() {
    let quota = Quota::per_minute(100).unwrap().with_burst(20).unwrap();
    let mut state = State::new(Algorithm::LeakyQueue, &quota);
    let delays: Vec<u64> = (0..21).map(|_| state.decide(&quota, 0, 1).delay).collect();
    assert_eq!(delays.last(), Some(&12_000_000_000));
    assert_eq!(delays[1], 600_000_000);
    assert!(!state.decide(&quota, 0, 1).allowed);
    let fresh = State::new(Algorithm::LeakyQueue, &quota);
    assert_eq!(fresh.preview(&quota, 0, 21).retry_after, RetryAfter::Now);
    assert_eq!(fresh.preview(&quota, 0, 22).retry_after, RetryAfter::Never);
}
