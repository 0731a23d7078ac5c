//! `Compact`: the 16-byte bucket-family key decides bit for bit as the
//! algorithm's own state, on random traces of decisions, peeks and refunds
//! (clock regressions included), for every quota it fits.

mod common;

use common::{any_quota, quota, shape};
use proptest::prelude::*;
use tollgate_core::algorithms::{Gcra, LeakyBucket, LeakyQueue, TokenBucket};
use tollgate_core::{AlgorithmState, Bucket, Compact, Quota};

/// One operation of a trace: a decision, or a refund of the cost.
fn refunds(len: usize) -> impl Strategy<Value = Vec<bool>> {
    prop::collection::vec(prop::bool::weighted(0.15), len)
}

/// Drives `S` and `Compact<S>` through the same trace; every decision must
/// be equal and the compact key must always convert back to the wide one.
fn agree<S: Bucket + PartialEq + std::fmt::Debug>(
    quota: &Quota,
    trace: &[(u64, u64)],
    refund: &[bool],
) -> Result<(), TestCaseError> {
    let mut wide = S::new(quota);
    let mut small = Compact::<S>::new(quota);
    for (i, &(t, c)) in trace.iter().enumerate() {
        if refund[i] {
            wide.refund(quota, t, c);
            small.refund(quota, t, c);
        } else {
            prop_assert_eq!(small.preview(quota, t, c), wide.preview(quota, t, c));
            prop_assert_eq!(
                small.decide(quota, t, c),
                wide.decide(quota, t, c),
                "step {}",
                i
            );
        }
        prop_assert_eq!(small.to_state(quota), wide, "step {}", i);
        prop_assert_eq!(small.last_update(), wide.last_update());
        prop_assert_eq!(small.is_idle(quota, t), wide.is_idle(quota, t));
    }
    Ok(())
}

fn all_four(quota: &Quota, trace: &[(u64, u64)], refund: &[bool]) -> Result<(), TestCaseError> {
    agree::<Gcra>(quota, trace, refund)?;
    agree::<TokenBucket>(quota, trace, refund)?;
    agree::<LeakyBucket>(quota, trace, refund)?;
    agree::<LeakyQueue>(quota, trace, refund)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn compact_decides_as_the_core(
        quota in quota().prop_filter("fits 64 bits", Compact::<Gcra>::fits),
        shape in shape(40),
        refund in refunds(40),
    ) {
        all_four(&quota, &shape.resolve(&quota), &refund)?;
    }

    /// The range's edges, where the debt comes closest to 64 bits.
    #[test]
    fn compact_decides_as_the_core_at_the_edges(
        quota in any_quota().prop_filter("fits 64 bits", Compact::<Gcra>::fits),
        shape in shape(40),
        refund in refunds(40),
    ) {
        all_four(&quota, &shape.resolve(&quota), &refund)?;
    }
}
