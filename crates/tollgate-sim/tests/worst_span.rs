//! The O(n) worst-span metric against the obvious O(n^2) definition.

use proptest::prelude::*;
use tollgate_sim::metrics::{worst_span, Charge};

/// Most cost in any `[s, s + span)`, trying every start in range.
fn brute_force(charges: &[Charge], span: u64) -> u64 {
    let starts = charges.iter().map(|c| c.at);
    starts
        .map(|s| {
            charges
                .iter()
                .filter(|c| c.at >= s && c.at - s < span)
                .map(|c| c.cost)
                .sum()
        })
        .max()
        .unwrap_or(0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn matches_brute_force(
        mut raw in prop::collection::vec((0u64..2_000, 0u64..4), 0..120),
        span in 0u64..600,
    ) {
        raw.sort_unstable();
        let charges: Vec<Charge> = raw.into_iter().map(|(at, cost)| Charge { at, cost }).collect();
        prop_assert_eq!(worst_span(&charges, span), brute_force(&charges, span));
    }

    #[test]
    fn a_span_covering_everything_holds_everything(
        mut raw in prop::collection::vec((0u64..1_000_000, 1u64..10), 1..60),
    ) {
        raw.sort_unstable();
        let charges: Vec<Charge> = raw.into_iter().map(|(at, cost)| Charge { at, cost }).collect();
        let total: u64 = charges.iter().map(|c| c.cost).sum();
        prop_assert_eq!(worst_span(&charges, 1_000_001), total);
    }
}

#[test]
fn extreme_times_do_not_overflow() {
    let c = [
        Charge {
            at: u64::MAX - 1,
            cost: 1,
        },
        Charge {
            at: u64::MAX,
            cost: 2,
        },
    ];
    assert_eq!(worst_span(&c, u64::MAX), 3);
    assert_eq!(worst_span(&c, 1), 2);
}
