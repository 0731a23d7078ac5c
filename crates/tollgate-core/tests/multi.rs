//! Several rules on one key: `decide_all` is atomic (all charged or none)
//! and reports the fold of `most_restrictive` over the rules' decisions.

mod common;

use common::{algorithm, quota, shape};
use proptest::prelude::*;
use tollgate_core::{decide_all, preview_all, Decision, Limit, State};

fn limits() -> impl Strategy<Value = Vec<Limit>> {
    prop::collection::vec(
        (algorithm(), quota()).prop_map(|(a, q)| Limit::new(a, q)),
        1..=3,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decide_all_is_atomic_and_folds_most_restrictive(
        limits in limits(),
        shape in shape(40),
    ) {
        // Costs and gaps are drawn against the first rule's quota.
        let trace = shape.resolve(&limits[0].quota);
        let mut states: Vec<State> = limits.iter().map(|l| State::new(l.algorithm, &l.quota)).collect();
        for (t, c) in trace {
            let before = states.clone();
            let each: Vec<Decision> = before
                .iter()
                .zip(&limits)
                .map(|(s, l)| s.preview(&l.quota, t, c))
                .collect();
            let folded = each.iter().copied().reduce(Decision::most_restrictive).unwrap();
            prop_assert_eq!(preview_all(&states, &limits, t, c), folded);
            prop_assert_eq!(&states, &before, "preview_all changed a state");

            let d = decide_all(&mut states, &limits, t, c);
            prop_assert_eq!(d, folded);
            prop_assert_eq!(d.allowed, each.iter().all(|e| e.allowed));
            if d.allowed {
                // Every rule charged, exactly as if decided alone.
                for ((s, l), old) in states.iter().zip(&limits).zip(&before) {
                    let mut alone = old.clone();
                    alone.decide(&l.quota, t, c);
                    prop_assert_eq!(s, &alone);
                }
            } else {
                prop_assert_eq!(&states, &before, "a denial charged some rule");
            }
        }
    }
}

#[test]
#[should_panic(expected = "one state per limit")]
fn mismatched_lengths_are_a_clear_programming_error() {
    let quota = tollgate_core::Quota::per_second(1).unwrap();
    let limit = Limit::new(tollgate_core::Algorithm::Gcra, quota);
    let mut states = vec![State::new(limit.algorithm, &quota)];
    decide_all(&mut states, &[limit, limit], 0, 1);
}
