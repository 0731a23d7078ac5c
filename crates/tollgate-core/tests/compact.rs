//! `Compact`: the 16-byte bucket-family key decides bit for bit as the
//! algorithm's own state, on random traces of decisions, peeks, refunds,
//! forced charges and leases (clock regressions included), for every quota
//! it fits, as long as forced charges leave a debt within 64 bits (beyond,
//! it keeps the most it can hold, as documented).

mod common;

use common::{any_quota, quota, shape};
use proptest::prelude::*;
use tollgate_core::algorithms::{Gcra, LeakyBucket, LeakyQueue, TokenBucket};
use tollgate_core::{AlgorithmState, Bucket, Compact, Quota};

/// What a trace step does with its time and cost.
#[derive(Clone, Copy, Debug)]
enum Op {
    Decide,
    Refund,
    Force,
    Lease,
}

fn ops(len: usize) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        10 => Just(Op::Decide),
        2 => Just(Op::Refund),
        1 => Just(Op::Force),
        2 => Just(Op::Lease),
    ];
    prop::collection::vec(op, len)
}

/// Drives `S` and `Compact<S>` through the same trace; every decision must
/// be equal and the compact key must always convert back to the wide one.
fn agree<S: Bucket + PartialEq + std::fmt::Debug>(
    quota: &Quota,
    trace: &[(u64, u64)],
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let mut wide = S::new(quota);
    let mut small = Compact::<S>::new(quota);
    for (i, (&(t, c), &op)) in trace.iter().zip(ops).enumerate() {
        prop_assert_eq!(small.preview(quota, t, c), wide.preview(quota, t, c));
        match op {
            Op::Decide => {
                prop_assert_eq!(
                    small.decide(quota, t, c),
                    wide.decide(quota, t, c),
                    "step {}",
                    i
                );
            }
            Op::Refund => {
                wide.refund(quota, t, c);
                small.refund(quota, t, c);
            }
            Op::Force => {
                let expected = wide.force(quota, t, c);
                let got = small.force(quota, t, c);
                if wide.debt_at_last(quota) > u128::from(u64::MAX) {
                    // Out of the compact range: the most it holds.
                    prop_assert_eq!(
                        small.to_state(quota).debt_at_last(quota),
                        u128::from(u64::MAX)
                    );
                    return Ok(());
                }
                prop_assert_eq!(got, expected, "step {}", i);
            }
            Op::Lease => {
                prop_assert_eq!(
                    small.lease(quota, t, c),
                    wide.lease(quota, t, c),
                    "step {}",
                    i
                );
            }
        }
        prop_assert_eq!(small.to_state(quota), wide, "step {}", i);
        prop_assert_eq!(small.last_update(), wide.last_update());
        prop_assert_eq!(small.is_idle(quota, t), wide.is_idle(quota, t));
    }
    Ok(())
}

fn all_four(quota: &Quota, trace: &[(u64, u64)], ops: &[Op]) -> Result<(), TestCaseError> {
    agree::<Gcra>(quota, trace, ops)?;
    agree::<TokenBucket>(quota, trace, ops)?;
    agree::<LeakyBucket>(quota, trace, ops)?;
    agree::<LeakyQueue>(quota, trace, ops)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn compact_decides_as_the_core(
        quota in quota().prop_filter("fits 64 bits", Compact::<Gcra>::fits),
        shape in shape(40),
        ops in ops(40),
    ) {
        all_four(&quota, &shape.resolve(&quota), &ops)?;
    }

    /// The range's edges, where the debt comes closest to 64 bits.
    #[test]
    fn compact_decides_as_the_core_at_the_edges(
        quota in any_quota().prop_filter("fits 64 bits", Compact::<Gcra>::fits),
        shape in shape(40),
        ops in ops(40),
    ) {
        all_four(&quota, &shape.resolve(&quota), &ops)?;
    }
}
