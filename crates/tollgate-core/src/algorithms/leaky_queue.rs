//! Leaky bucket as a queue (nginx `limit_req` with `burst` and no
//! `nodelay`): requests are released one emission interval apart; one is
//! served at once and up to `burst` more wait.

use super::{bucket, Step};
use crate::ticks::Ticks;
use crate::{Decision, Quota, RetryAfter};

/// When the drain is next free (ticks since time 0), and the last charge's time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LeakyQueue {
    next_free: Ticks,
    last: u64,
}

impl LeakyQueue {
    /// The time a request at `now` is judged at, in ns and in ticks, and the
    /// wait for the drain then (a debt like a bucket's: see `bucket`).
    #[inline(always)]
    pub(crate) fn wait(&self, quota: &Quota, now: u64) -> (u64, u128, u128) {
        let now = now.max(self.last);
        let at = quota.ticks(now);
        (now, at, self.next_free.get().saturating_sub(at))
    }

    #[inline(always)]
    pub(crate) fn queued(now: u64, at: u128, wait: u128) -> Self {
        LeakyQueue {
            next_free: Ticks::new(at + wait),
            last: now,
        }
    }
}

impl Step for LeakyQueue {
    fn fresh(_quota: &Quota) -> Self {
        LeakyQueue::default()
    }

    #[inline(always)]
    fn step(&self, quota: &Quota, now: u64, cost: u64) -> (Decision, Self) {
        let (now, at, wait) = self.wait(quota, now);
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
            let next = LeakyQueue::queued(now, at, wait_after);
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
        let (now, at, wait) = self.wait(quota, now);
        LeakyQueue::queued(now, at, bucket::refund(quota, wait, cost))
    }

    /// Queues `cost` emission intervals, past the burst if need be.
    fn forced(&self, quota: &Quota, now: u64, cost: u64) -> Self {
        let (now, at, wait) = self.wait(quota, now);
        LeakyQueue::queued(now, at, bucket::force(quota, wait, cost))
    }

    fn last(&self) -> u64 {
        self.last
    }
}
