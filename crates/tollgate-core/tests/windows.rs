//! Window bounds checked by brute force over the admitted requests: the
//! sliding log never exceeds `limit` in any half-open span of `period`, the
//! fixed window never exceeds `2 * limit` in one and `limit` in an aligned
//! window.

mod common;

use common::{admitted, quota, shape};
use proptest::prelude::*;
use tollgate_core::{Algorithm, Quota};

/// The most cost admitted in any half-open span `[a, a + period)`. The
/// maximum is reached with `a` at an admitted request, so those are the
/// only starts to try.
fn busiest_span(ok: &[(u64, u64)], period: u64) -> u128 {
    ok.iter()
        .map(|&(a, _)| {
            let end = a as u128 + period as u128;
            ok.iter()
                .filter(|&&(t, _)| t >= a && (t as u128) < end)
                .map(|&(_, c)| c as u128)
                .sum::<u128>()
        })
        .max()
        .unwrap_or(0)
}

fn dense_quota() -> impl Strategy<Value = Quota> {
    quota().prop_filter("too few requests to reach the limit", |q| q.limit() <= 50)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn sliding_log_never_exceeds_limit_in_any_span(quota in quota(), shape in shape(60)) {
        let ok = admitted(Algorithm::SlidingLog, &quota, &shape.resolve(&quota));
        prop_assert!(busiest_span(&ok, quota.period_ns()) <= quota.limit() as u128);
    }

    #[test]
    fn sliding_log_bound_on_small_limits(quota in dense_quota(), shape in shape(80)) {
        let ok = admitted(Algorithm::SlidingLog, &quota, &shape.resolve(&quota));
        prop_assert!(busiest_span(&ok, quota.period_ns()) <= quota.limit() as u128);
    }

    #[test]
    fn fixed_window_at_most_twice_the_limit_in_any_span(quota in dense_quota(), shape in shape(80)) {
        let ok = admitted(Algorithm::FixedWindow, &quota, &shape.resolve(&quota));
        prop_assert!(busiest_span(&ok, quota.period_ns()) <= 2 * quota.limit() as u128);
        // And at most `limit` in each aligned window.
        let p = quota.period_ns();
        for &(a, _) in &ok {
            let window: u128 = ok.iter().filter(|&&(t, _)| t / p == a / p).map(|&(_, c)| c as u128).sum();
            prop_assert!(window <= quota.limit() as u128);
        }
    }
}

/// The fixed window's bound is reached: `limit` at the end of one window and
/// `limit` at the start of the next, one nanosecond apart.
#[test]
fn fixed_window_bound_is_tight() {
    let quota = Quota::new(10, 1_000).unwrap();
    let trace = [(999, 10), (1_000, 10)];
    let ok = admitted(Algorithm::FixedWindow, &quota, &trace);
    assert_eq!(busiest_span(&ok, 1_000), 20);
    let ok = admitted(Algorithm::SlidingLog, &quota, &trace);
    assert_eq!(busiest_span(&ok, 1_000), 10);
}
