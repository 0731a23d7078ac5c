//! The bucket family: token bucket, GCRA and leaky meter are one rule kept
//! in three ways, so their decisions are identical on every trace; and the
//! token bucket's admitted cost obeys its bound on every span.

mod common;

use common::{admitted, monotone_shape, quota, shape};
use proptest::prelude::*;
use tollgate_core::{Algorithm, RetryAfter, State};

const FAMILY: [Algorithm; 3] = [
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::LeakyBucket,
];

fn identical_decisions(
    quota: &tollgate_core::Quota,
    trace: &[(u64, u64)],
) -> Result<(), TestCaseError> {
    let mut states = FAMILY.map(|a| State::new(a, quota));
    for &(t, c) in trace {
        let [tb, gcra, leaky] = states.each_mut().map(|s| s.decide(quota, t, c));
        prop_assert_eq!(tb, gcra, "token bucket vs GCRA at {} cost {}", t, c);
        prop_assert_eq!(tb, leaky, "token bucket vs leaky meter at {} cost {}", t, c);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A bucket of capacity 0 holds nothing: every request that costs
    /// anything can never fit, and peeks see nothing remaining.
    #[test]
    fn an_empty_bucket_admits_only_peeks(quota in quota(), shape in shape(30)) {
        let quota = quota.with_burst(0).unwrap();
        for algorithm in FAMILY {
            let mut key = State::new(algorithm, &quota);
            for (t, c) in shape.resolve(&quota) {
                let d = key.decide(&quota, t, c);
                prop_assert_eq!(d.allowed, c == 0);
                prop_assert_eq!(d.remaining, 0);
                let never = if c == 0 { RetryAfter::Now } else { RetryAfter::Never };
                prop_assert_eq!(d.retry_after, never);
            }
        }
    }

    #[test]
    fn family_agrees_on_forward_traces(quota in quota(), shape in monotone_shape(60)) {
        identical_decisions(&quota, &shape.resolve(&quota))?;
    }

    #[test]
    fn family_agrees_with_clock_regressions(quota in quota(), shape in shape(60)) {
        identical_decisions(&quota, &shape.resolve(&quota))?;
    }

    /// Between any two admitted requests (inclusive, span `S` between them)
    /// at most `burst + floor(limit * S / period)` cost was admitted.
    #[test]
    fn token_bucket_bound(quota in quota(), shape in shape(60)) {
        let ok = admitted(Algorithm::TokenBucket, &quota, &shape.resolve(&quota));
        for (i, &(first, _)) in ok.iter().enumerate() {
            let mut total = 0u128;
            for &(t, c) in &ok[i..] {
                total += c as u128;
                let span = (t - first) as u128;
                let bound = quota.burst() as u128
                    + quota.limit() as u128 * span / quota.period_ns() as u128;
                prop_assert!(total <= bound, "{} admitted in [{}, {}], bound {}", total, first, t, bound);
            }
        }
    }
}
