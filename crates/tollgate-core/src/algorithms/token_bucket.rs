//! Token bucket: tokens refill continuously at `limit / period`, capped at
//! `burst`; a request takes `cost` tokens or is refused. Starts full.

use super::{bucket, Step};
use crate::ticks::Ticks;
use crate::{Decision, Quota};

/// Tokens (in ticks, one token = `T`) as of the last charge, and its time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokenBucket {
    pub(crate) tokens: Ticks,
    pub(crate) last: u64,
}

impl Step for TokenBucket {
    fn fresh(quota: &Quota) -> Self {
        TokenBucket {
            tokens: Ticks::new(quota.burst_ticks()),
            last: 0,
        }
    }

    #[inline(always)]
    fn step(&self, quota: &Quota, now: u64, cost: u64) -> (Decision, Self) {
        let now = now.max(self.last);
        let capacity = quota.burst_ticks();
        let refill = quota.ticks(now - self.last);
        // At most 2^102 + 2^104 ticks (`Quota`'s bounds): no overflow.
        let tokens = capacity.min(self.tokens.get() + refill);
        let (decision, debt) = bucket::decide(quota, capacity - tokens, cost);
        (
            decision,
            TokenBucket {
                tokens: Ticks::new(capacity - debt),
                last: now,
            },
        )
    }

    fn refunded(&self, quota: &Quota, now: u64, cost: u64) -> Self {
        let now = now.max(self.last);
        let capacity = quota.burst_ticks();
        let refill = quota.ticks(now - self.last);
        let tokens = capacity.min(self.tokens.get().saturating_add(refill));
        TokenBucket {
            tokens: Ticks::new(capacity - bucket::refund(quota, capacity - tokens, cost)),
            last: now,
        }
    }

    fn last(&self) -> u64 {
        self.last
    }
}
