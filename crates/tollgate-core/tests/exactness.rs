//! The reported numbers of docs/SEMANTICS.md are exact, probed through the core itself: a
//! denied request's `retry_after` is the first instant it fits, `remaining`
//! the largest cost that fits now, `reset_after` the first instant the key is
//! idle, and `never` exactly when the cost exceeds the capacity.

mod common;

use common::{algorithm, any_quota, quota, shape, Key};
use proptest::prelude::*;
use tollgate_core::{Algorithm, Quota, RetryAfter};

/// Decides `(t, cost)` on `key` and checks every reported number against
/// probes of the states before and after.
fn check_step(
    algorithm: Algorithm,
    quota: &Quota,
    key: &mut Key,
    t: u64,
    cost: u64,
) -> Result<(), TestCaseError> {
    let before = key.state.clone();
    let (at, d) = key.decide(quota, t, cost);
    let after = &key.state;
    let capacity = quota.capacity(algorithm);
    prop_assert_eq!(d.limit, capacity);
    prop_assert!(d.remaining <= capacity);
    prop_assert_eq!(d.allowed, d.retry_after == RetryAfter::Now);
    if cost == 0 {
        prop_assert!(d.allowed, "a peek is always admitted");
    }
    // Windows: cost > limit; buckets: cost > burst; queue: cost - 1 > burst.
    prop_assert_eq!(d.retry_after == RetryAfter::Never, cost > capacity);

    match d.retry_after {
        RetryAfter::Now => {}
        RetryAfter::After(wait) => {
            prop_assert!(wait >= 1);
            if let Some(then) = at.checked_add(wait) {
                prop_assert!(
                    !before.preview(quota, then - 1, cost).allowed,
                    "admitted 1ns early"
                );
                prop_assert!(
                    before.preview(quota, then, cost).allowed,
                    "denied at retry_after"
                );
            }
        }
        RetryAfter::Never => {
            let far = at.saturating_add(3 * quota.period_ns().max(quota.burst()));
            for then in [at, far, u64::MAX] {
                prop_assert!(
                    !before.preview(quota, then, cost).allowed,
                    "never admitted at {}",
                    then
                );
            }
        }
    }

    // `remaining`: that much fits at the same instant, one more does not.
    if d.remaining > 0 {
        prop_assert!(after.preview(quota, at, d.remaining).allowed);
    }
    prop_assert!(!after.preview(quota, at, d.remaining + 1).allowed);

    // A peek at the same instant reports the same numbers.
    let peek = after.preview(quota, at, 0);
    prop_assert_eq!(
        (peek.remaining, peek.reset_after),
        (d.remaining, d.reset_after)
    );

    // `reset_after`: idle (fresh numbers) then, and not one ns before.
    if let Some(then) = at.checked_add(d.reset_after) {
        let idle = after.preview(quota, then, 0);
        prop_assert_eq!((idle.remaining, idle.reset_after), (capacity, 0));
        prop_assert!(after.is_idle(quota, then));
        if d.reset_after > 0 {
            prop_assert!(after.preview(quota, then - 1, 0).reset_after > 0);
            prop_assert!(!after.is_idle(quota, then - 1));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(384))]

    #[test]
    fn reported_numbers_are_exact(algorithm in algorithm(), quota in quota(), shape in shape(40)) {
        let mut key = Key::new(algorithm, &quota);
        for (t, c) in shape.resolve(&quota) {
            check_step(algorithm, &quota, &mut key, t, c)?;
        }
    }

    /// The same over the whole range `Quota` accepts, extremes included.
    #[test]
    fn reported_numbers_are_exact_at_the_extremes(
        algorithm in algorithm(),
        quota in any_quota(),
        shape in shape(20),
    ) {
        let mut key = Key::new(algorithm, &quota);
        for (t, c) in shape.resolve(&quota) {
            check_step(algorithm, &quota, &mut key, t, c)?;
        }
    }
}
