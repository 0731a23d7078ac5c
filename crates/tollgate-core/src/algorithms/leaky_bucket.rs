//! Leaky bucket as a meter: a level that drains at `limit / period`; a
//! request adds `cost` to it or is refused if it would overflow `burst`.

use super::{bucket, Step};
use crate::ticks::Ticks;
use crate::{Decision, Quota};

/// The level (in ticks) as of the last charge, and its time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LeakyBucket {
    pub(crate) level: Ticks,
    pub(crate) last: u64,
}

impl Step for LeakyBucket {
    fn fresh(_quota: &Quota) -> Self {
        LeakyBucket::default()
    }

    #[inline(always)]
    fn step(&self, quota: &Quota, now: u64, cost: u64) -> (Decision, Self) {
        let now = now.max(self.last);
        let leaked = quota.ticks(now - self.last);
        let level = self.level.get().saturating_sub(leaked);
        let (decision, level) = bucket::decide(quota, level, cost);
        (
            decision,
            LeakyBucket {
                level: Ticks::new(level),
                last: now,
            },
        )
    }

    fn refunded(&self, quota: &Quota, now: u64, cost: u64) -> Self {
        let now = now.max(self.last);
        let level = self
            .level
            .get()
            .saturating_sub(quota.ticks(now - self.last));
        LeakyBucket {
            level: Ticks::new(bucket::refund(quota, level, cost)),
            last: now,
        }
    }

    fn last(&self) -> u64 {
        self.last
    }
}
