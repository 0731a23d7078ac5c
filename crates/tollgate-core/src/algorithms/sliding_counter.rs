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

    #[inline(always)]
    fn step(&self, quota: &Quota, now: u64, cost: u64) -> (Decision, Self) {
        let now = now.max(self.last);
        let period = quota.period_ns();
        let limit = quota.limit();
        let (prev, curr) = self.rolled(quota, now);
        // The previous window's weight, in ns still inside the trailing period.
        let weight = quota.until_window_end(now);
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
        if quota.cost_ticks(curr.saturating_add(cost)) <= room || cost == 0 {
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

    fn forced(&self, quota: &Quota, now: u64, cost: u64) -> Self {
        let now = now.max(self.last);
        let (prev, curr) = self.rolled(quota, now);
        SlidingCounter {
            prev,
            curr: curr.saturating_add(cost),
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
        match quota.window(now) - quota.window(self.last) {
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
    if let Some(spare) = curr.checked_add(cost).and_then(|c| limit.checked_sub(c)) {
        let x = largest_weight(prev, spare, weight);
        if x >= 1 && x < weight {
            return weight - x;
        }
    }
    weight + period - largest_weight(curr, limit - cost, period)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AlgorithmState;

    /// 10 per 10 ns, so weights and counts are easy to follow by hand.
    fn quota() -> Quota {
        Quota::new(10, 10).unwrap()
    }

    fn charged(requests: &[(u64, u64)]) -> SlidingCounter {
        let mut state = SlidingCounter::new(&quota());
        for &(t, cost) in requests {
            assert!(state.decide(&quota(), t, cost).allowed);
        }
        state
    }

    #[test]
    fn retry_within_the_window_as_the_previous_one_fades() {
        // prev = 10 at t = 10 (weight 10): 10*10 + 1*10 > 100. At t = 11 the
        // weight is 9: 90 + 10 = 100 fits.
        let state = charged(&[(5, 10)]);
        let d = state.preview(&quota(), 10, 1);
        assert_eq!(d.retry_after, RetryAfter::After(1));
        assert_eq!(d.remaining, 0);
    }

    #[test]
    fn retry_in_the_next_window_when_this_one_is_full() {
        // curr = 10 in window [10, 20): nothing fits before t = 20, where it
        // becomes prev with weight 10; at t = 21 (weight 9) 90 + 10 = 100 fits.
        let state = charged(&[(10, 10)]);
        assert_eq!(
            state.preview(&quota(), 15, 1).retry_after,
            RetryAfter::After(6)
        );
        // A full-limit request must wait until no previous count weighs: t = 30.
        assert_eq!(
            state.preview(&quota(), 15, 10).retry_after,
            RetryAfter::After(15)
        );
    }

    #[test]
    fn retry_at_the_window_end_when_the_previous_count_never_fades_enough() {
        // prev = 10 at t = 10: a cost of 10 needs prev's weight at 0, which
        // only the next window (where prev becomes this window's 0) gives.
        let state = charged(&[(5, 10)]);
        assert_eq!(
            state.preview(&quota(), 10, 10).retry_after,
            RetryAfter::After(10)
        );
    }

    #[test]
    fn reset_after_counts_both_windows() {
        let state = charged(&[(5, 3), (12, 2)]);
        // curr = 2 at t = 12 fades out at the end of the next window, t = 30.
        assert_eq!(state.preview(&quota(), 12, 0).reset_after, 18);
        // Only prev left at t = 25 (curr = 2 from window 1): gone at t = 30.
        assert_eq!(state.preview(&quota(), 25, 0).reset_after, 5);
        assert_eq!(state.preview(&quota(), 30, 0).reset_after, 0);
    }
}
