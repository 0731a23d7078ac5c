//! What the experiments measure: the most admitted in any span, per-second
//! series and wait percentiles. All exact, on integer nanoseconds.

use serde::Serialize;

/// Cost admitted (or released) at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Charge {
    /// Time in nanoseconds.
    pub at: u64,
    /// Cost units.
    pub cost: u64,
}

/// The most cost in any half-open span `[s, s + span)`, over charges sorted
/// by time.
///
/// A busiest span can always be slid right until it starts at a charge, so
/// only spans starting at a charge are tried; the end pointer only moves
/// forward, which makes this O(n).
pub fn worst_span(charges: &[Charge], span: u64) -> u64 {
    debug_assert!(charges.windows(2).all(|w| w[0].at <= w[1].at));
    if span == 0 {
        return 0;
    }
    let (mut end, mut inside, mut best) = (0usize, 0u64, 0u64);
    for first in charges {
        // Sorted, so `at - first.at` cannot underflow (nor overflow, as
        // `first.at + span` could).
        while end < charges.len() && charges[end].at - first.at < span {
            inside += charges[end].cost;
            end += 1;
        }
        best = best.max(inside);
        // `span >= 1` keeps `first` inside, so it is there to take out.
        inside -= first.cost;
    }
    best
}

/// Cost per whole second `[k s, (k+1) s)` for `k` in `0..seconds`.
pub fn per_second(charges: &[Charge], seconds: u64) -> Vec<u64> {
    let mut bins = vec![0; seconds as usize];
    for c in charges {
        if let Some(bin) = bins.get_mut((c.at / 1_000_000_000) as usize) {
            *bin += c.cost;
        }
    }
    bins
}

/// How long admitted requests waited before release (the leaky queue).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WaitStats {
    /// The longest wait, ns.
    pub max_ns: u64,
    /// The median wait (nearest rank), ns.
    pub p50_ns: u64,
    /// The 99th percentile wait (nearest rank), ns.
    pub p99_ns: u64,
}

impl WaitStats {
    /// Summarises `waits` (any order); all zero when empty.
    pub fn of(waits: &[u64]) -> Self {
        let mut sorted = waits.to_vec();
        sorted.sort_unstable();
        WaitStats {
            max_ns: sorted.last().copied().unwrap_or(0),
            p50_ns: nearest_rank(&sorted, 50),
            p99_ns: nearest_rank(&sorted, 99),
        }
    }
}

/// The nearest-rank percentile `p` (1..=100) of sorted values, 0 when empty:
/// the smallest value with at least `p`% of values at or below it.
fn nearest_rank(sorted: &[u64], p: u64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (sorted.len() as u64 * p).div_ceil(100).max(1);
    sorted[rank as usize - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(times: &[u64]) -> Vec<Charge> {
        times.iter().map(|&at| Charge { at, cost: 1 }).collect()
    }

    #[test]
    fn spans_are_half_open() {
        let c = at(&[0, 10, 20]);
        assert_eq!(worst_span(&c, 10), 1);
        assert_eq!(worst_span(&c, 11), 2);
        assert_eq!(worst_span(&c, 21), 3);
        assert_eq!(worst_span(&[], 5), 0);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let w: Vec<u64> = (1..=100).collect();
        let s = WaitStats::of(&w);
        assert_eq!((s.max_ns, s.p50_ns, s.p99_ns), (100, 50, 99));
        assert_eq!(WaitStats::of(&[]), WaitStats::default());
        assert_eq!(WaitStats::of(&[7]).p99_ns, 7);
    }

    #[test]
    fn per_second_bins() {
        let c = at(&[0, 999_999_999, 1_000_000_000, 5_000_000_000]);
        assert_eq!(per_second(&c, 3), vec![2, 1, 0]);
    }
}
