//! Fixed window: a counter per window `[k*period, (k+1)*period)` aligned on
//! time 0; admits while `count + cost <= limit`. A forced charge may take
//! the count past `limit`: the window then admits nothing until it ends.

use super::Step;
use crate::{Decision, Quota, RetryAfter};

/// The count of the window holding the last charge, and that charge's time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FixedWindow {
    count: u64,
    last: u64,
}

impl FixedWindow {
    /// The time a request at `now` is judged at, and its window's count
    /// (charges of an earlier window have expired, forced ones included).
    #[inline(always)]
    fn count(&self, quota: &Quota, now: u64) -> (u64, u64) {
        let now = now.max(self.last);
        let same = quota.window(now) == quota.window(self.last);
        (now, if same { self.count } else { 0 })
    }
}

impl Step for FixedWindow {
    fn fresh(_quota: &Quota) -> Self {
        FixedWindow::default()
    }

    #[inline(always)]
    fn step(&self, quota: &Quota, now: u64, cost: u64) -> (Decision, Self) {
        let (now, count) = self.count(quota, now);
        let limit = quota.limit();
        let to_end = quota.until_window_end(now);
        let report = |allowed, count: u64, retry_after| Decision {
            allowed,
            limit,
            remaining: limit.saturating_sub(count),
            retry_after,
            reset_after: if count > 0 { to_end } else { 0 },
            delay: 0,
        };
        if cost > limit {
            return (report(false, count, RetryAfter::Never), *self);
        }
        if cost <= limit.saturating_sub(count) || cost == 0 {
            let count = count + cost;
            (
                report(true, count, RetryAfter::Now),
                FixedWindow { count, last: now },
            )
        } else {
            (report(false, count, RetryAfter::After(to_end)), *self)
        }
    }

    fn refunded(&self, quota: &Quota, now: u64, cost: u64) -> Self {
        let (now, count) = self.count(quota, now);
        FixedWindow {
            count: count.saturating_sub(cost),
            last: now,
        }
    }

    fn forced(&self, quota: &Quota, now: u64, cost: u64) -> Self {
        let (now, count) = self.count(quota, now);
        FixedWindow {
            count: count.saturating_add(cost),
            last: now,
        }
    }

    fn last(&self) -> u64 {
        self.last
    }
}
