//! Leaky bucket as a meter: a level that drains at `limit / period`; a
//! request adds `cost` to it or is refused if it would overflow `burst`.

use super::{bucket, Step};
use crate::ticks::Ticks;
use crate::{Decision, Quota};

/// The level (in ticks) as of the last charge, and its time. A forced
/// charge may leave it above the burst.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LeakyBucket {
    level: Ticks,
    last: u64,
}

impl LeakyBucket {
    /// The time a request at `now` is judged at, and the level then.
    #[inline(always)]
    pub(crate) fn debt(&self, quota: &Quota, now: u64) -> (u64, u128) {
        let now = now.max(self.last);
        let leaked = quota.ticks(now - self.last);
        (now, self.level.get().saturating_sub(leaked))
    }

    #[inline(always)]
    pub(crate) fn owing(now: u64, level: u128) -> Self {
        LeakyBucket {
            level: Ticks::new(level),
            last: now,
        }
    }
}

impl Step for LeakyBucket {
    fn fresh(_quota: &Quota) -> Self {
        LeakyBucket::default()
    }

    #[inline(always)]
    fn step(&self, quota: &Quota, now: u64, cost: u64) -> (Decision, Self) {
        let (now, level) = self.debt(quota, now);
        let (decision, level) = bucket::decide(quota, level, cost);
        (decision, LeakyBucket::owing(now, level))
    }

    fn refunded(&self, quota: &Quota, now: u64, cost: u64) -> Self {
        let (now, level) = self.debt(quota, now);
        LeakyBucket::owing(now, bucket::refund(quota, level, cost))
    }

    fn forced(&self, quota: &Quota, now: u64, cost: u64) -> Self {
        let (now, level) = self.debt(quota, now);
        LeakyBucket::owing(now, bucket::force(quota, level, cost))
    }

    fn last(&self) -> u64 {
        self.last
    }
}
