//! `Quota` validation: every error path, and the documented range accepted.

mod common;

use common::{MAX_LIMIT, MAX_PERIOD};
use proptest::prelude::*;
use tollgate_core::{Algorithm, Quota, QuotaError};

#[test]
fn each_error_path() {
    assert_eq!(Quota::new(0, 1), Err(QuotaError::ZeroLimit));
    assert_eq!(Quota::per_second(0), Err(QuotaError::ZeroLimit));
    assert_eq!(Quota::new(1, 0), Err(QuotaError::ZeroPeriod));
    let big = Quota::MAX_LIMIT + 1;
    assert_eq!(Quota::new(big, 1), Err(QuotaError::LimitTooLarge(big)));
    assert_eq!(
        Quota::per_minute(u64::MAX),
        Err(QuotaError::LimitTooLarge(u64::MAX))
    );
    assert_eq!(
        Quota::with_parts(1, 1, big),
        Err(QuotaError::BurstTooLarge(big))
    );
    let long = Quota::MAX_SPAN_NS + 1;
    assert_eq!(Quota::new(1, long), Err(QuotaError::PeriodTooLong(long)));
    // One request per 2^61 ns with a burst of 3: refilling takes 1.5 * 2^62 ns.
    assert_eq!(
        Quota::with_parts(2, Quota::MAX_SPAN_NS, 3),
        Err(QuotaError::RefillTooLong {
            burst: 3,
            limit: 2,
            period_ns: Quota::MAX_SPAN_NS
        })
    );
}

#[test]
fn errors_name_the_offending_value() {
    let cases = [
        (QuotaError::ZeroLimit, "limit"),
        (QuotaError::ZeroPeriod, "period"),
        (
            QuotaError::LimitTooLarge(1_000_000_000_001),
            "1000000000001",
        ),
        (
            QuotaError::BurstTooLarge(1_000_000_000_002),
            "1000000000002",
        ),
        (
            QuotaError::PeriodTooLong(4_611_686_018_427_387_905),
            "4611686018427387905ns",
        ),
        (
            QuotaError::RefillTooLong {
                burst: 77,
                limit: 3,
                period_ns: 9,
            },
            "burst 77 at 3 per 9ns",
        ),
    ];
    for (error, needle) in cases {
        let message = error.to_string();
        assert!(message.contains(needle), "{message:?} lacks {needle:?}");
    }
}

/// Burst 0 is a quota of its own: the queue serves one request at a time
/// and queues none, a bucket holds nothing, the windows ignore it.
#[test]
fn burst_zero_is_accepted_with_a_capacity_per_algorithm() {
    let q = Quota::per_minute(100).unwrap().with_burst(0).unwrap();
    assert_eq!((q.limit(), q.burst()), (100, 0));
    assert_eq!(q.capacity(Algorithm::LeakyQueue), 1);
    assert_eq!(q.capacity(Algorithm::Gcra), 0);
    assert_eq!(q.capacity(Algorithm::SlidingCounter), 100);
    assert!(Quota::with_parts(Quota::MAX_LIMIT, Quota::MAX_SPAN_NS, 0).is_ok());
}

#[test]
fn the_edges_of_the_range_are_accepted() {
    let q = Quota::with_parts(Quota::MAX_LIMIT, Quota::MAX_SPAN_NS, Quota::MAX_LIMIT).unwrap();
    assert_eq!(
        (q.limit(), q.period_ns(), q.burst()),
        (Quota::MAX_LIMIT, Quota::MAX_SPAN_NS, Quota::MAX_LIMIT)
    );
    // Refill of exactly 2^62 ns is still fine.
    assert!(Quota::with_parts(2, Quota::MAX_SPAN_NS, 2).is_ok());
    assert!(Quota::with_parts(1, 1, Quota::MAX_LIMIT).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Limits and bursts up to 10^9 with periods from 1 ns to 366 days are
    /// accepted exactly when refilling the burst takes at most 2^62 ns, and
    /// always when the burst is at most the limit.
    #[test]
    fn documented_range(
        limit in 1..=MAX_LIMIT,
        period in prop_oneof![1..=1_000u64, 1..=MAX_PERIOD, Just(MAX_PERIOD)],
        burst in 0..=MAX_LIMIT,
    ) {
        let refill = (burst as u128 * period as u128).div_ceil(limit as u128);
        let fits = refill <= 1u128 << 62;
        match Quota::with_parts(limit, period, burst) {
            Ok(q) => {
                prop_assert!(fits);
                prop_assert_eq!((q.limit(), q.period_ns(), q.burst()), (limit, period, burst));
                prop_assert_eq!(q.capacity(Algorithm::SlidingLog), limit);
                prop_assert_eq!(q.capacity(Algorithm::Gcra), burst);
                prop_assert_eq!(q.capacity(Algorithm::LeakyQueue), burst + 1);
            }
            Err(e) => {
                prop_assert!(!fits, "{:?}", e);
                prop_assert_eq!(e, QuotaError::RefillTooLong { burst, limit, period_ns: period });
            }
        }
        let q = Quota::new(limit, period).unwrap();
        prop_assert_eq!(q.burst(), limit);
        prop_assert_eq!(q.with_burst(limit.min(burst)).map(|q| q.burst()), Ok(limit.min(burst)));
    }

    #[test]
    fn out_of_range_values_are_refused(
        over in (Quota::MAX_LIMIT + 1)..=u64::MAX,
        long in (Quota::MAX_SPAN_NS + 1)..=u64::MAX,
        ok in 1..=MAX_LIMIT,
    ) {
        prop_assert_eq!(Quota::with_parts(over, 1, ok), Err(QuotaError::LimitTooLarge(over)));
        prop_assert_eq!(Quota::with_parts(ok, 1, over), Err(QuotaError::BurstTooLarge(over)));
        prop_assert_eq!(Quota::with_parts(ok, long, ok), Err(QuotaError::PeriodTooLong(long)));
    }
}
