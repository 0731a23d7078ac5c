//! Sliding window counter: the previous aligned window's count weighted by
//! the share of it still inside the trailing period, plus the current one;
//! admits iff `prev*(period - elapsed) + (curr + cost)*period <= limit*period`.

use super::Step;
use crate::{Decision, Quota, RetryAfter};

/// Counts of the window before the last charge's window and of that window,
/// and the last charge's time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SlidingCounter {
    prev: u64,
    curr: u64,
    last: u64,
}

impl Step for SlidingCounter {
    fn fresh(_quota: &Quota) -> Self {
        SlidingCounter::default()
    }

    fn step(&self, quota: &Quota, now: u64, cost: u64) -> (Decision, Self) {
        let now = now.max(self.last);
        let period = quota.period_ns();
        let limit = quota.limit();
        let (prev, curr) = self.rolled(quota, now);
        // The previous window's weight, in ns still inside the trailing period.
        let weight = period - now % period;
        let room = quota
            .cost_ticks(limit)
            .saturating_sub(prev as u128 * weight as u128);
        let report = |allowed, curr: u64, retry_after| Decision {
            allowed,
            limit,
            remaining: quota.units_floor(room).saturating_sub(curr),
            retry_after,
            reset_after: if curr > 0 {
                weight + period
            } else if prev > 0 {
                weight
            } else {
                0
            },
            delay: 0,
        };
        if cost > limit {
            return (report(false, curr, RetryAfter::Never), *self);
        }
        if quota.cost_ticks(curr + cost) <= room || cost == 0 {
            let next = SlidingCounter {
                prev,
                curr: curr + cost,
                last: now,
            };
            return (report(true, curr + cost, RetryAfter::Now), next);
        }
        let wait = retry_after(quota, prev, curr, cost, weight);
        (report(false, curr, RetryAfter::After(wait)), *self)
    }

    /// Takes the cost back from the current window first (the newest
    /// charges), then from the previous one.
    fn refunded(&self, quota: &Quota, now: u64, cost: u64) -> Self {
        let now = now.max(self.last);
        let (prev, curr) = self.rolled(quota, now);
        let from_curr = curr.min(cost);
        SlidingCounter {
            prev: prev.saturating_sub(cost - from_curr),
            curr: curr - from_curr,
            last: now,
        }
    }

    fn last(&self) -> u64 {
        self.last
    }
}

impl SlidingCounter {
    /// The (previous, current) counts as seen from `now`'s window (`now >= last`).
    fn rolled(&self, quota: &Quota, now: u64) -> (u64, u64) {
        let period = quota.period_ns();
        match now / period - self.last / period {
            0 => (self.prev, self.curr),
            1 => (self.curr, 0),
            _ => (0, 0),
        }
    }
}

/// The exact wait for a denied `cost` (`cost <= limit`): first while the
/// previous window's weight shrinks in this window, else in the next one,
/// where this window's count becomes the previous one.
fn retry_after(quota: &Quota, prev: u64, curr: u64, cost: u64, weight: u64) -> u64 {
    let period = quota.period_ns();
    let limit = quota.limit();
    // Largest weight `x` with `count * x <= spare * period`, capped at `cap`.
    let largest_weight = |count: u64, spare: u64, cap: u64| -> u64 {
        if count == 0 {
            return cap;
        }
        let x = quota.cost_ticks(spare) / count as u128;
        x.min(cap as u128) as u64
    };
    if let Some(spare) = limit.checked_sub(curr + cost) {
        let x = largest_weight(prev, spare, weight);
        if x >= 1 && x < weight {
            return weight - x;
        }
    }
    weight + period - largest_weight(curr, limit - cost, period)
}
