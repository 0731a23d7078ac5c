//! The arithmetic shared by the token bucket, GCRA and the leaky meter: all
//! three reduce a key to its *debt*, the capacity in use at `now` in ticks
//! (`0..=burst*T`, or beyond after a forced charge), and differ only in how
//! they store it. The leaky queue's wait is a debt of the same kind.

use crate::{Decision, Quota, RetryAfter};

/// The most debt a forced charge can leave, in ticks: far more than a wait of
/// `u64::MAX` ns at any quota (durations saturate there), and small enough
/// that adding a charge or a clock reading never overflows a `u128`.
const MAX_DEBT: u128 = 1 << 120;

/// Decides a request of `cost` against `debt`; returns the decision and the
/// debt after charging it (meaningful only when admitted).
#[inline(always)]
pub(crate) fn decide(quota: &Quota, debt: u128, cost: u64) -> (Decision, u128) {
    let capacity = quota.burst_ticks();
    // One place builds the decision, so it is inlined into the caller with
    // the rest (three calls to a `report` closure were kept out of line,
    // a call and a stack round trip of the decision per check).
    let (allowed, debt_after, retry_after) = if cost > quota.burst() {
        (false, debt, RetryAfter::Never)
    } else {
        let after = debt + quota.cost_ticks(cost);
        if after <= capacity || cost == 0 {
            (true, after, RetryAfter::Now)
        } else {
            let wait = RetryAfter::After(quota.ns_ceil(after - capacity));
            (false, debt, wait)
        }
    };
    let decision = Decision {
        allowed,
        limit: quota.burst(),
        remaining: quota.units_floor(capacity.saturating_sub(debt_after)),
        retry_after,
        reset_after: quota.ns_ceil(debt_after),
        delay: 0,
    };
    (decision, debt_after)
}

/// `debt` after giving back `cost`: never below 0, the debt of a full bucket.
#[inline]
pub(crate) fn refund(quota: &Quota, debt: u128, cost: u64) -> u128 {
    debt.saturating_sub(quota.cost_ticks(cost))
}

/// `debt` after a forced charge of `cost`, which may go past the capacity
/// (capped at [`MAX_DEBT`], where every wait has long saturated).
#[inline]
pub(crate) fn force(quota: &Quota, debt: u128, cost: u64) -> u128 {
    (debt + quota.cost_ticks(cost)).min(MAX_DEBT)
}
