//! The operations beyond a decision: `force` (a charge that never denies),
//! `lease` (the largest admitted cost, charged at once) and their
//! multi-rule forms, against the reference models and SPEC's invariants.

mod common;

use common::models::Model;
use common::{algorithm, quota, shape, Key};
use proptest::prelude::*;
use tollgate_core::{
    decide_all, force_all, lease_all, preview_all, refund_all, Algorithm, Decision, LeaseError,
    Limit, Quota, RetryAfter, State,
};

/// Which requests of a trace are forced rather than decided.
fn forced_steps(max_len: usize) -> impl Strategy<Value = Vec<bool>> {
    prop::collection::vec(prop::bool::weighted(0.3), max_len)
}

/// A forced cost for the models: at most one capacity, and only while the
/// key's debt stays below 2^62 ns, so every wait fits the models' `u64`.
fn force_cost(key: &State, quota: &Quota, at: u64, cost: u64) -> Option<u64> {
    let room = key.preview(quota, at, 0).reset_after < 1 << 62;
    room.then(|| cost.min(quota.capacity(key.algorithm())))
}

/// `retry_after` is exact (SPEC invariant 3) from any state, debt included.
fn retry_is_exact(state: &State, quota: &Quota, at: u64, cost: u64) -> Result<(), TestCaseError> {
    let d = state.preview(quota, at, cost);
    if let RetryAfter::After(wait) = d.retry_after {
        let Some(then) = at.checked_add(wait) else {
            return Ok(());
        };
        prop_assert!(
            state.preview(quota, then, cost).allowed,
            "not admitted after {}",
            wait
        );
        prop_assert!(
            !state.preview(quota, then - 1, cost).allowed,
            "admitted before {}",
            wait
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(384))]

    /// Decisions and forced charges, mixed, give the models' numbers on
    /// every algorithm: debt is repaid exactly as SPEC states, and every
    /// wait after it is exact.
    #[test]
    fn force_matches_the_models(quota in quota(), shape in shape(30), forced in forced_steps(30)) {
        let trace = shape.resolve(&quota);
        for algorithm in Algorithm::ALL {
            let mut model = Model::new(algorithm, &quota);
            let mut key = Key::new(algorithm, &quota);
            for (i, (&(t, c), &force)) in trace.iter().zip(&forced).enumerate() {
                let at = key.effective(t);
                match force.then(|| force_cost(&key.state, &quota, at, c)).flatten() {
                    Some(c) => {
                        let got = key.state.force(&quota, t, c);
                        if c > 0 {
                            key.last = at;
                        }
                        prop_assert!(got.allowed);
                        prop_assert_eq!(got, model.force(t, c), "{} force {} at {} cost {}", algorithm, i, t, c);
                    }
                    None => {
                        let (_, got) = key.decide(&quota, t, c);
                        prop_assert_eq!(got, model.decide(t, c), "{} request {} at {} cost {}", algorithm, i, t, c);
                    }
                }
                prop_assert_eq!(key.state.last_update(), key.last);
                retry_is_exact(&key.state, &quota, key.effective(t), c.max(1))?;
            }
        }
    }

    /// SPEC invariant 4 with forced costs counted as admitted ones: between
    /// any charge and a later *admitted* request (span `S` between them) the
    /// bucket family took at most `burst + floor(limit * S / period)`, and
    /// the sliding log at most `limit` in any period ending at an admitted
    /// request; a fixed window's charges up to its last admitted request
    /// stay within `limit`. (A window forgets at its end what was forced in
    /// it; a bucket carries it as debt.)
    #[test]
    fn bounds_hold_with_forced_costs_counted(
        quota in quota(),
        shape in shape(40),
        forced in forced_steps(40),
    ) {
        let trace = shape.resolve(&quota);
        for algorithm in [Algorithm::TokenBucket, Algorithm::Gcra, Algorithm::LeakyBucket, Algorithm::SlidingLog, Algorithm::FixedWindow] {
            let mut key = Key::new(algorithm, &quota);
            // (time, cost, admitted rather than forced) of every charge.
            let mut charges: Vec<(u64, u64, bool)> = vec![];
            for (&(t, c), &force) in trace.iter().zip(&forced) {
                let at = key.effective(t);
                if force && c > 0 {
                    key.state.force(&quota, t, c);
                    key.last = at;
                    charges.push((at, c, false));
                } else if c > 0 && key.decide(&quota, t, c).1.allowed {
                    charges.push((at, c, true));
                }
            }
            let (limit, period) = (quota.limit() as u128, quota.period_ns());
            for (j, &(end, _, admitted)) in charges.iter().enumerate() {
                if !admitted {
                    continue;
                }
                let mut total = 0u128;
                for &(start, c, _) in charges[..=j].iter().rev() {
                    total += c as u128;
                    let span = (end - start) as u128;
                    match algorithm {
                        Algorithm::SlidingLog if span < period as u128 => {
                            prop_assert!(total <= limit, "{} in a period ending at {}", total, end);
                        }
                        Algorithm::FixedWindow if start / period == end / period => {
                            prop_assert!(total <= limit, "{} in the window of {}", total, end);
                        }
                        Algorithm::SlidingLog | Algorithm::FixedWindow => {}
                        _ => {
                            let bound = quota.burst() as u128 + limit * span / period as u128;
                            prop_assert!(total <= bound, "{} in [{}, {}], bound {}", total, start, end, bound);
                        }
                    }
                }
            }
        }
    }

    /// A lease grants `k = min(max, remaining)`, exactly the decision of
    /// charging `k`; when `k < max`, `k + 1` is denied at that instant.
    #[test]
    fn lease_grants_the_largest_admitted_cost(
        algorithm in algorithm(),
        quota in quota(),
        shape in shape(30),
        max in prop_oneof![0u64..=5, any::<u64>()],
    ) {
        let mut key = Key::new(algorithm, &quota);
        for (t, c) in shape.resolve(&quota) {
            key.decide(&quota, t, c);
            let at = key.effective(t);
            let mut leased = key.state.clone();
            let lease = match leased.lease(&quota, t, max) {
                Err(e) => {
                    prop_assert_eq!(algorithm, Algorithm::SlidingLog);
                    prop_assert_eq!(e, LeaseError::NotLeasable(Algorithm::SlidingLog));
                    prop_assert_eq!(&leased, &key.state, "a refused lease changed the key");
                    continue;
                }
                Ok(lease) => lease,
            };
            let k = lease.granted;
            prop_assert!(k <= max);
            if k > 0 {
                let mut charged = key.state.clone();
                prop_assert_eq!(lease.decision, charged.decide(&quota, at, k));
                prop_assert_eq!(&leased, &charged);
            } else {
                prop_assert_eq!(&leased, &key.state, "an empty lease changed the key");
                prop_assert_eq!(lease.decision, key.state.preview(&quota, at, max.min(1)));
            }
            if k < max {
                prop_assert!(!key.state.preview(&quota, at, k + 1).allowed, "{} + 1 would fit", k);
            }
        }
    }

    /// The multi-rule forms: `lease_all` grants what every rule admits,
    /// atomically; `force_all` and `refund_all` act on every rule as the
    /// single-rule forms do.
    #[test]
    fn multi_rule_operations(
        limits in prop::collection::vec((algorithm(), quota()).prop_map(|(a, q)| Limit::new(a, q)), 1..=3),
        shape in shape(30),
        max in 0u64..=20,
    ) {
        let mut states: Vec<State> = limits.iter().map(|l| State::new(l.algorithm, &l.quota)).collect();
        let leasable = limits.iter().all(|l| l.algorithm != Algorithm::SlidingLog);
        for (i, (t, c)) in shape.resolve(&limits[0].quota).into_iter().enumerate() {
            let before = states.clone();
            match i % 3 {
                0 => {
                    let got = lease_all(&mut states, &limits, t, max);
                    let Ok(lease) = got else {
                        prop_assert!(!leasable);
                        prop_assert_eq!(&states, &before, "a refused lease charged a rule");
                        continue;
                    };
                    prop_assert!(leasable);
                    let mut alone = before.clone();
                    let k = lease.granted;
                    if k > 0 {
                        prop_assert_eq!(lease.decision, decide_all(&mut alone, &limits, t, k));
                    }
                    prop_assert_eq!(&states, &alone, "not the charge of {}", k);
                    if k < max {
                        prop_assert!(!preview_all(&before, &limits, t, k + 1).allowed);
                    }
                }
                1 => {
                    let c = c.min(1_000);
                    let got = force_all(&mut states, &limits, t, c);
                    let mut each = before.clone();
                    let want = each
                        .iter_mut()
                        .zip(&limits)
                        .map(|(s, l)| s.force(&l.quota, t, c))
                        .reduce(Decision::most_restrictive)
                        .unwrap();
                    prop_assert_eq!(got, want);
                    prop_assert_eq!(&states, &each);
                }
                _ => {
                    let d = decide_all(&mut states, &limits, t, c);
                    if d.allowed && c > 0 {
                        // A refund undoes the charge for any later request.
                        let mut undone = states.clone();
                        let now = t.max(before.iter().map(State::last_update).max().unwrap());
                        refund_all(&mut undone, &limits, now, c);
                        let later = now.saturating_add(limits[0].quota.period_ns() / 3);
                        prop_assert_eq!(
                            preview_all(&undone, &limits, later, 1),
                            preview_all(&before, &limits, later, 1)
                        );
                    }
                }
            }
        }
    }
}

/// A forced charge puts a bucket into debt: denied until it is repaid, to
/// the nanosecond.
#[test]
fn forced_debt_is_repaid_at_the_rate() {
    let quota = Quota::per_second(10).unwrap(); // T = 100 ms
    let mut key = State::new(Algorithm::Gcra, &quota);
    let d = key.force(&quota, 0, 25);
    assert!(d.allowed);
    assert_eq!((d.remaining, d.reset_after), (0, 2_500_000_000));
    // 15 units of debt beyond the burst, then one more for the request.
    let denied = key.decide(&quota, 0, 1);
    assert_eq!(denied.retry_after, RetryAfter::After(1_600_000_000));
    assert!(!key.decide(&quota, 1_599_999_999, 1).allowed);
    assert!(key.decide(&quota, 1_600_000_000, 1).allowed);
}

/// A fixed window's forced excess blocks until the window ends.
#[test]
fn forced_window_count_passes_the_limit() {
    let quota = Quota::new(10, 1_000).unwrap();
    let mut key = State::new(Algorithm::FixedWindow, &quota);
    assert_eq!(key.force(&quota, 100, 25).remaining, 0);
    assert_eq!(
        key.decide(&quota, 200, 1).retry_after,
        RetryAfter::After(800)
    );
    assert!(key.decide(&quota, 1_000, 10).allowed);
}

#[test]
fn sliding_log_refuses_a_lease() {
    let quota = Quota::per_second(10).unwrap();
    let mut key = State::new(Algorithm::SlidingLog, &quota);
    let err = key.lease(&quota, 0, 5).unwrap_err();
    assert!(
        err.to_string().contains("sliding_log cannot lease"),
        "{err}"
    );
}
