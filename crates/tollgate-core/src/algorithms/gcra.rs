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
    pub(crate) tat: Ticks,
    pub(crate) last: u64,
}

impl Step for Gcra {
    fn fresh(_quota: &Quota) -> Self {
        Gcra::default()
    }

    #[inline(always)]
    fn step(&self, quota: &Quota, now: u64, cost: u64) -> (Decision, Self) {
        let now = now.max(self.last);
        let at = quota.ticks(now);
        let debt = self.tat.get().saturating_sub(at);
        let (decision, debt) = bucket::decide(quota, debt, cost);
        (
            decision,
            Gcra {
                tat: Ticks::new(at + debt),
                last: now,
            },
        )
    }

    fn refunded(&self, quota: &Quota, now: u64, cost: u64) -> Self {
        let now = now.max(self.last);
        let at = quota.ticks(now);
        let debt = self.tat.get().saturating_sub(at);
        Gcra {
            tat: Ticks::new(at + bucket::refund(quota, debt, cost)),
            last: now,
        }
    }

    fn last(&self) -> u64 {
        self.last
    }
}
