//! Sliding window log: every admitted request's time and cost; admits iff
//! the costs in `(now - period, now]` plus `cost` stay within `limit`.
//!
//! Entries carry a running total of costs, so the sum in the window, the
//! first live entry and the exact `retry_after` are searches (galloping from
//! the oldest entry, so O(log k) for the k entries skipped), and a charge
//! drops expired entries from the front: O(1) amortised per decision.
//! Requests at the same nanosecond share one entry.

use std::collections::VecDeque;

use super::AlgorithmState;
use crate::{Algorithm, Decision, Lease, LeaseError, Quota, RetryAfter};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Entry {
    at: u64,
    /// Running total of all costs charged through this entry (wrapping; only
    /// differences between entries in the log are used, and those are at
    /// most `limit`).
    total: u64,
}

/// The admitted requests of the trailing period, and the last charge's time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SlidingLog {
    entries: VecDeque<Entry>,
    /// The running total before the first entry.
    base: u64,
    last: u64,
}

impl SlidingLog {
    /// How many entries (distinct request instants) the log holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the log holds no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Heap bytes held by the log.
    pub fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry>()
    }

    /// First index at or after `from` whose entry fails `keep_left`, which
    /// holds for a prefix. Gallops from `from` before bisecting: O(log k)
    /// probes for an answer `k` entries in, so the usual case (a few entries
    /// just expired) costs a couple of probes however long the log.
    fn partition_from(&self, from: usize, keep_left: impl Fn(&Entry) -> bool) -> usize {
        let len = self.entries.len();
        // Invariant: every entry in `from..lo` passes; the answer is in `lo..=hi`.
        let (mut lo, mut step) = (from, 1);
        let mut hi = loop {
            let probe = lo + step - 1;
            if probe >= len {
                break len;
            }
            if !keep_left(&self.entries[probe]) {
                break probe;
            }
            lo = probe + 1;
            step *= 2;
        };
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if keep_left(&self.entries[mid]) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    fn total_before(&self, index: usize) -> u64 {
        match index {
            0 => self.base,
            i => self.entries[i - 1].total,
        }
    }

    /// The cost of the entries from `live` on.
    fn live_sum(&self, live: usize) -> u64 {
        let start = self.total_before(live);
        self.entries
            .back()
            .map_or(0, |e| e.total.wrapping_sub(start))
    }

    /// Drops the entries before `live` (expired) and records `cost` at `now`.
    fn charge(&mut self, now: u64, cost: u64, live: usize) {
        let now = now.max(self.last);
        if live > 0 {
            self.base = self.entries[live - 1].total;
            // Usually one or two entries: cheaper than a `drain`.
            for _ in 0..live {
                self.entries.pop_front();
            }
            // A burst can leave a large, mostly empty buffer behind.
            if self.entries.capacity() > 64 && self.entries.len() * 4 < self.entries.capacity() {
                self.entries.shrink_to(self.entries.len() * 2);
            }
        }
        let total = self
            .entries
            .back()
            .map_or(self.base, |e| e.total)
            .wrapping_add(cost);
        match self.entries.back_mut() {
            Some(e) if e.at == now => e.total = total,
            _ => self.entries.push_back(Entry { at: now, total }),
        }
        self.last = now;
    }

    /// The decision, and the index of the first entry still in the window.
    #[inline]
    fn evaluate(&self, quota: &Quota, now: u64, cost: u64) -> (Decision, usize) {
        let now = now.max(self.last);
        let period = quota.period_ns();
        let limit = quota.limit();
        let live = match now.checked_sub(period) {
            Some(cutoff) => self.partition_from(0, |e| e.at <= cutoff),
            None => 0,
        };
        let start = self.total_before(live);
        let sum = self.live_sum(live);
        // An entry at `t` leaves the window when the clock reaches `t + period`.
        let leaves_after = |at: u64| (at as u128 + period as u128 - now as u128) as u64;
        let report = |allowed, sum: u64, newest: Option<u64>, retry_after| Decision {
            allowed,
            limit,
            remaining: limit.saturating_sub(sum),
            retry_after,
            reset_after: match newest {
                Some(at) if sum > 0 => leaves_after(at),
                _ => 0,
            },
            delay: 0,
        };
        let newest = self.entries.back().map(|e| e.at);
        if cost > limit {
            return (report(false, sum, newest, RetryAfter::Never), live);
        }
        if cost <= limit.saturating_sub(sum) {
            let newest = if cost > 0 { Some(now) } else { newest };
            return (report(true, sum + cost, newest, RetryAfter::Now), live);
        }
        // The oldest entries must leave until `excess` cost has gone.
        // Denied with `cost <= limit`, so `sum > limit - cost`.
        let excess = sum - (limit - cost);
        let k = self.partition_from(live, |e| e.total.wrapping_sub(start) < excess);
        let wait = RetryAfter::After(leaves_after(self.entries[k].at));
        (report(false, sum, newest, wait), live)
    }
}

/// The sliding log cannot lease: see [`LeaseError`].
impl AlgorithmState for SlidingLog {
    fn new(_quota: &Quota) -> Self {
        SlidingLog::default()
    }

    fn preview(&self, quota: &Quota, now: u64, cost: u64) -> Decision {
        self.evaluate(quota, now, cost).0
    }

    #[inline]
    fn decide(&mut self, quota: &Quota, now: u64, cost: u64) -> Decision {
        let (decision, live) = self.evaluate(quota, now, cost);
        if decision.allowed && cost > 0 {
            self.charge(now, cost, live);
        }
        decision
    }

    /// Records `cost` at `now` whatever the window holds. The live sum is
    /// kept below 2^64: a larger cost counts as the most that fits, which
    /// blocks the key for the period all the same.
    fn force(&mut self, quota: &Quota, now: u64, cost: u64) -> Decision {
        if cost > 0 {
            let (_, live) = self.evaluate(quota, now, 0);
            let cost = cost.min(u64::MAX - self.live_sum(live));
            if cost > 0 {
                self.charge(now, cost, live);
            }
        }
        self.preview(quota, now, 0)
    }

    /// Takes the cost back from the newest entries. Entries that have left
    /// the window count for nothing, so taking from them changes no decision.
    fn refund(&mut self, _quota: &Quota, now: u64, mut cost: u64) {
        if cost == 0 {
            return;
        }
        while cost > 0 {
            let Some(&newest) = self.entries.back() else {
                break;
            };
            let before = self.total_before(self.entries.len() - 1);
            let charged = newest.total.wrapping_sub(before);
            if charged > cost {
                if let Some(e) = self.entries.back_mut() {
                    e.total = newest.total.wrapping_sub(cost);
                }
                cost = 0;
            } else {
                self.entries.pop_back();
                cost -= charged;
            }
        }
        self.last = self.last.max(now);
    }

    fn lease(&mut self, _quota: &Quota, _now: u64, _max: u64) -> Result<Lease, LeaseError> {
        Err(LeaseError::NotLeasable(Algorithm::SlidingLog))
    }

    fn last_update(&self) -> u64 {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log with one entry of cost 1 every 3 ns from 0 to 3 * (n - 1).
    fn log(n: u64) -> SlidingLog {
        let quota = Quota::new(u32::MAX as u64, 1 << 40).unwrap();
        let mut log = SlidingLog::new(&quota);
        for i in 0..n {
            assert!(log.decide(&quota, 3 * i, 1).allowed);
        }
        log
    }

    #[test]
    fn galloping_partition_matches_a_scan() {
        for n in [0, 1, 2, 3, 7, 8, 9, 100] {
            let log = log(n);
            for from in 0..=n as usize {
                for cutoff in 0..3 * n + 3 {
                    let keep = |e: &Entry| e.at <= cutoff;
                    let scan = (from..log.len())
                        .find(|&i| !keep(&log.entries[i]))
                        .unwrap_or(log.len());
                    assert_eq!(log.partition_from(from, keep), scan, "{n} {from} {cutoff}");
                }
            }
        }
    }

    #[test]
    fn requests_at_one_instant_share_an_entry() {
        let quota = Quota::new(10, 100).unwrap();
        let mut log = SlidingLog::new(&quota);
        for _ in 0..4 {
            log.decide(&quota, 7, 2);
        }
        assert_eq!(log.len(), 1);
        assert_eq!(log.preview(&quota, 7, 0).remaining, 2);
        // The shared entry leaves as a whole at 7 + 100.
        assert_eq!(
            log.preview(&quota, 7, 3).retry_after,
            RetryAfter::After(100)
        );
    }
}
