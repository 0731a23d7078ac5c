//! Token bucket: tokens refill continuously at `limit / period`, capped at
//! `burst`; a request takes `cost` tokens or is refused. Starts full.

use super::{bucket, Step};
use crate::ticks::Ticks;
use crate::{Decision, Quota};

/// Tokens (in ticks, one token = `T`) as of the last charge, and its time.
///
/// The count is signed, kept as the two's complement bits of an `i128`: a
/// forced charge may take more tokens than the bucket holds, and the debt
/// is repaid by the refill before anything is admitted again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokenBucket {
    tokens: Ticks,
    last: u64,
}

impl TokenBucket {
    /// The time a request at `now` is judged at, and the tokens missing
    /// from a full bucket then (the debt).
    #[inline(always)]
    pub(crate) fn debt(&self, quota: &Quota, now: u64) -> (u64, u128) {
        let now = now.max(self.last);
        let capacity = quota.burst_ticks() as i128;
        let refill = quota.ticks(now - self.last) as i128;
        // Tokens are above -2^121 and the refill below 2^105: no overflow.
        let tokens = capacity.min(self.tokens.get() as i128 + refill);
        (now, (capacity - tokens) as u128)
    }

    #[inline(always)]
    pub(crate) fn owing(quota: &Quota, now: u64, debt: u128) -> Self {
        TokenBucket {
            tokens: Ticks::new((quota.burst_ticks() as i128 - debt as i128) as u128),
            last: now,
        }
    }
}

impl Step for TokenBucket {
    fn fresh(quota: &Quota) -> Self {
        TokenBucket::owing(quota, 0, 0)
    }

    #[inline(always)]
    fn step(&self, quota: &Quota, now: u64, cost: u64) -> (Decision, Self) {
        let (now, debt) = self.debt(quota, now);
        let (decision, debt) = bucket::decide(quota, debt, cost);
        (decision, TokenBucket::owing(quota, now, debt))
    }

    fn refunded(&self, quota: &Quota, now: u64, cost: u64) -> Self {
        let (now, debt) = self.debt(quota, now);
        TokenBucket::owing(quota, now, bucket::refund(quota, debt, cost))
    }

    fn forced(&self, quota: &Quota, now: u64, cost: u64) -> Self {
        let (now, debt) = self.debt(quota, now);
        TokenBucket::owing(quota, now, bucket::force(quota, debt, cost))
    }

    fn last(&self) -> u64 {
        self.last
    }
}
