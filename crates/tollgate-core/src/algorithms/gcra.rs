//! GCRA: the key is its theoretical arrival time (TAT); a request of `cost`
//! is admitted iff `max(TAT, now) + cost*T - now <= burst*T`.

use super::{bucket, Step};
use crate::ticks::Ticks;
use crate::{Decision, Quota};

/// The TAT in ticks since time 0, and the time of the last charge.
///
/// The TAT alone cannot be a single `u64`: with `T = period / limit` kept
/// exact it needs about 94 bits (ns times the limit), and the last charge's
/// time is what keeps a late request from being judged in the past.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Gcra {
    tat: Ticks,
    last: u64,
}

impl Gcra {
    /// The time a request at `now` is judged at, and the debt then.
    #[inline(always)]
    pub(crate) fn debt(&self, quota: &Quota, now: u64) -> (u64, u128) {
        let now = now.max(self.last);
        (now, self.tat.get().saturating_sub(quota.ticks(now)))
    }

    #[inline(always)]
    pub(crate) fn owing(quota: &Quota, now: u64, debt: u128) -> Self {
        Gcra {
            tat: Ticks::new(quota.ticks(now) + debt),
            last: now,
        }
    }
}

impl Step for Gcra {
    fn fresh(_quota: &Quota) -> Self {
        Gcra::default()
    }

    #[inline(always)]
    fn step(&self, quota: &Quota, now: u64, cost: u64) -> (Decision, Self) {
        let (now, debt) = self.debt(quota, now);
        let (decision, debt) = bucket::decide(quota, debt, cost);
        (decision, Gcra::owing(quota, now, debt))
    }

    fn refunded(&self, quota: &Quota, now: u64, cost: u64) -> Self {
        let (now, debt) = self.debt(quota, now);
        Gcra::owing(quota, now, bucket::refund(quota, debt, cost))
    }

    fn forced(&self, quota: &Quota, now: u64, cost: u64) -> Self {
        let (now, debt) = self.debt(quota, now);
        Gcra::owing(quota, now, bucket::force(quota, debt, cost))
    }

    fn last(&self) -> u64 {
        self.last
    }
}
