//! The most a policy admits to one key in any span of a given length: what
//! an observed peak is compared with (the overshoot).
//!
//! These are the guarantees of docs/SEMANTICS.md ("Guarantees", 4): a
//! bucket admits at most `burst + ⌊limit × S / period⌋` in any span `S`; a
//! fixed window at most `limit` per window, and a span meets at most
//! `⌈S / period⌉ + 1` windows; a sliding log `limit` per period, so
//! `⌈S / period⌉ × limit`. The sliding counter is held to the fixed
//! window's bound (its current window never passes `limit`); the leaky
//! queue admits one more than its bucket (the request being served).

use tollgate_core::{Algorithm, Limit};

/// The most `limit` admits in any half-open span of `span_ns`.
pub fn most_admitted(limit: &Limit, span_ns: u64) -> u64 {
    let q = &limit.quota;
    let (n, p) = (q.limit() as u128, q.period_ns() as u128);
    let s = span_ns as u128;
    let refill = || (n * s / p) as u64;
    let windows = || s.div_ceil(p) as u64;
    let v = match limit.algorithm {
        Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket => {
            q.burst().saturating_add(refill())
        }
        Algorithm::LeakyQueue => q.burst().saturating_add(1).saturating_add(refill()),
        Algorithm::FixedWindow | Algorithm::SlidingCounter => {
            (windows() + 1).saturating_mul(q.limit())
        }
        Algorithm::SlidingLog => windows().saturating_mul(q.limit()),
    };
    if span_ns == 0 {
        0
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tollgate_core::Quota;

    const S: u64 = 1_000_000_000;

    fn limit(a: Algorithm, n: u64, period: u64, burst: u64) -> Limit {
        Limit::new(a, Quota::with_parts(n, period, burst).unwrap())
    }

    #[test]
    fn the_documented_bounds() {
        let tb = limit(Algorithm::TokenBucket, 100, 60 * S, 20);
        assert_eq!(most_admitted(&tb, 60 * S), 120);
        assert_eq!(most_admitted(&tb, S), 21);
        let fw = limit(Algorithm::FixedWindow, 100, 60 * S, 100);
        assert_eq!(most_admitted(&fw, 60 * S), 200);
        assert_eq!(most_admitted(&fw, S), 200);
        let log = limit(Algorithm::SlidingLog, 100, 60 * S, 100);
        assert_eq!(most_admitted(&log, 60 * S), 100);
        assert_eq!(most_admitted(&log, 61 * S), 200);
        assert_eq!(most_admitted(&tb, 0), 0);
    }

    proptest! {
        /// The exact core never admits more than the bound, for requests
        /// at any times, in spans of one period and of one second.
        #[test]
        fn the_core_keeps_the_bound(
            a in prop::sample::select(Algorithm::ALL.to_vec()),
            n in 1u64..20, period_ms in 1u64..3000, burst in 1u64..20,
            gaps in prop::collection::vec(0u64..400_000_000, 1..200),
        ) {
            let l = limit(a, n, period_ms * 1_000_000, burst);
            let mut state = tollgate_core::State::new(l.algorithm, &l.quota);
            let mut admitted = Vec::new();
            let mut t = 0u64;
            for g in gaps {
                t += g;
                if state.decide(&l.quota, t, 1).allowed {
                    admitted.push(tollgate_sim::metrics::Charge { at: t, cost: 1 });
                }
            }
            for span in [l.quota.period_ns(), S] {
                let worst = tollgate_sim::metrics::worst_span(&admitted, span);
                prop_assert!(worst <= most_admitted(&l, span), "{a} {span}: {worst}");
            }
        }
    }
}
