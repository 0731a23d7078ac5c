//! The core against the naive reference models of `tests/common/models.rs`,
//! decision for decision (the whole `Decision`), on random quotas and traces
//! with clock regressions.

mod common;

use common::models::Model;
use common::ratio::Ratio;
use common::{any_quota, quota, shape};
use proptest::prelude::*;
use tollgate_core::{Algorithm, Quota, State};

fn matches_models(quota: &Quota, trace: &[(u64, u64)]) -> Result<(), TestCaseError> {
    for algorithm in Algorithm::ALL {
        let mut model = Model::new(algorithm, quota);
        let mut state = State::new(algorithm, quota);
        for (i, &(t, c)) in trace.iter().enumerate() {
            let want = model.decide(t, c);
            let got = state.decide(quota, t, c);
            prop_assert_eq!(got, want, "{} request {} at {} cost {}", algorithm, i, t, c);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_algorithm_matches_its_model(quota in quota(), shape in shape(40)) {
        matches_models(&quota, &shape.resolve(&quota))?;
    }

    /// The same anywhere in the range `Quota` accepts (limits to 10^12,
    /// periods to 2^62 ns), where the core's arithmetic is widest.
    #[test]
    fn every_algorithm_matches_its_model_at_the_extremes(quota in any_quota(), shape in shape(20)) {
        matches_models(&quota, &shape.resolve(&quota))?;
    }

    /// The token bucket and GCRA models are two formulations of one rule;
    /// each core bucket must agree with both.
    #[test]
    fn bucket_family_matches_token_and_gcra_models(quota in quota(), shape in shape(40)) {
        let trace = shape.resolve(&quota);
        let mut tokens = Model::new(Algorithm::TokenBucket, &quota);
        let mut gcra = Model::new(Algorithm::Gcra, &quota);
        let mut cores = [Algorithm::TokenBucket, Algorithm::Gcra, Algorithm::LeakyBucket]
            .map(|a| State::new(a, &quota));
        for (t, c) in trace {
            let want = tokens.decide(t, c);
            prop_assert_eq!(gcra.decide(t, c), want, "models disagree at {} cost {}", t, c);
            for core in &mut cores {
                prop_assert_eq!(core.decide(&quota, t, c), want, "{:?} at {} cost {}", core.algorithm(), t, c);
            }
        }
    }
}

#[test]
fn ratio_arithmetic() {
    let third = Ratio::new(1, 3);
    let half = Ratio::new(2, 4);
    assert_eq!(half, Ratio::new(1, 2));
    assert_eq!(third.add(half), Ratio::new(5, 6));
    assert_eq!(half.sub(third), Ratio::new(1, 6));
    assert_eq!(third.saturating_sub(half), Ratio::ZERO);
    assert_eq!(third.mul(Ratio::int(6u8)), Ratio::int(2u8));
    assert_eq!(half.div(third), Ratio::new(3, 2));
    assert_eq!((Ratio::new(7, 2).floor(), Ratio::new(7, 2).ceil()), (3, 4));
    assert!(third < half && Ratio::new(5, 2) > Ratio::int(2u8));
    let huge = Ratio::new(u64::MAX as u128 * 1_000_000_000, 999_999_937);
    assert!(huge > huge.saturating_sub(Ratio::new(1, 999_999_937)));
}

/// The models reproduce the published boundary-burst numbers on their own,
/// so they are worth comparing the core with.
#[test]
fn models_reproduce_the_published_cases() {
    const S: u64 = 1_000_000_000;
    let quota = Quota::per_minute(100).unwrap();
    let at = [59 * S + S / 2, 60 * S + S / 2, 91 * S];
    let expect = [
        (Algorithm::FixedWindow, [100, 100, 0]),
        (Algorithm::SlidingLog, [100, 0, 0]),
        (Algorithm::SlidingCounter, [100, 0, 51]),
        (Algorithm::TokenBucket, [100, 1, 51]),
        (Algorithm::Gcra, [100, 1, 51]),
    ];
    for (algorithm, want) in expect {
        let mut model = Model::new(algorithm, &quota);
        let got = at.map(|t| (0..100).filter(|_| model.decide(t, 1).allowed).count());
        assert_eq!(got, want, "{algorithm}");
    }
}
