//! Leaky bucket as a queue (nginx `limit_req` with `burst` and no
//! `nodelay`): requests are released one emission interval apart; one is
//! served at once and up to `burst` more wait.

use super::Step;
use crate::ticks::Ticks;
use crate::{Decision, Quota, RetryAfter};

/// When the drain is next free (ticks since time 0), and the last charge's time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LeakyQueue {
    pub(crate) next_free: Ticks,
    pub(crate) last: u64,
}

impl Step for LeakyQueue {
    fn fresh(_quota: &Quota) -> Self {
        LeakyQueue::default()
    }

    #[inline(always)]
    fn step(&self, quota: &Quota, now: u64, cost: u64) -> (Decision, Self) {
        let now = now.max(self.last);
        let at = quota.ticks(now);
        let wait = self.next_free.get().saturating_sub(at);
        let burst = quota.burst_ticks();
        let report = |allowed, wait_after: u128, retry_after, delay| Decision {
            allowed,
            limit: quota.burst() + 1,
            remaining: quota.units_floor((burst + quota.cost_ticks(1)).saturating_sub(wait_after)),
            retry_after,
            reset_after: quota.ns_ceil(wait_after),
            delay,
        };
        if cost == 0 {
            return (report(true, wait, RetryAfter::Now, 0), *self);
        }
        if cost - 1 > quota.burst() {
            return (report(false, wait, RetryAfter::Never, 0), *self);
        }
        let queued = wait + quota.cost_ticks(cost - 1);
        if queued <= burst {
            let wait_after = wait + quota.cost_ticks(cost);
            let next = LeakyQueue {
                next_free: Ticks::new(at + wait_after),
                last: now,
            };
            (
                report(true, wait_after, RetryAfter::Now, quota.ns_ceil(wait)),
                next,
            )
        } else {
            let retry = RetryAfter::After(quota.ns_ceil(queued - burst));
            (report(false, wait, retry, 0), *self)
        }
    }

    /// Frees `cost` emission intervals of the queue, never before `now`.
    fn refunded(&self, quota: &Quota, now: u64, cost: u64) -> Self {
        let now = now.max(self.last);
        let at = quota.ticks(now);
        let wait = self.next_free.get().saturating_sub(at);
        LeakyQueue {
            next_free: Ticks::new(at + wait.saturating_sub(quota.cost_ticks(cost))),
            last: now,
        }
    }

    fn last(&self) -> u64 {
        self.last
    }
}
