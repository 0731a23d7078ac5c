//! Several rules on one request, decided atomically: either every rule
//! admits and every rule is charged, or none is charged.

use crate::lease::grant;
use crate::{Algorithm, Decision, Lease, LeaseError, Limit, State};

/// What [`decide_all`] would return, without charging anything.
///
/// `states` and `limits` pair up by index. Panics if they differ in length or
/// are empty, which is a programming error rather than bad input.
pub fn preview_all(states: &[State], limits: &[Limit], now: u64, cost: u64) -> Decision {
    assert_eq!(states.len(), limits.len(), "one state per limit");
    states
        .iter()
        .zip(limits)
        .map(|(s, l)| s.preview(&l.quota, now, cost))
        .reduce(Decision::most_restrictive)
        .expect("at least one limit")
}

/// Decides a request against every rule at once: charged on all of them if
/// all admit, on none otherwise. Returns [`Decision::most_restrictive`] of the
/// rules' decisions (as they read after the charge when admitted).
///
/// Panics like [`preview_all`] on mismatched or empty slices.
pub fn decide_all(states: &mut [State], limits: &[Limit], now: u64, cost: u64) -> Decision {
    assert_eq!(states.len(), limits.len(), "one state per limit");
    if states.len() == 1 {
        return states[0].decide(&limits[0].quota, now, cost);
    }
    let verdict = preview_all(states, limits, now, cost);
    if !verdict.allowed || cost == 0 {
        return verdict;
    }
    states
        .iter_mut()
        .zip(limits)
        .map(|(s, l)| s.decide(&l.quota, now, cost))
        .reduce(Decision::most_restrictive)
        .expect("at least one limit")
}

/// Gives `cost` back on every rule (see [`State::refund`]): the inverse of a
/// charge of `cost` at `now`, capped at a fresh key on each rule.
///
/// Panics like [`preview_all`] on mismatched slices.
pub fn refund_all(states: &mut [State], limits: &[Limit], now: u64, cost: u64) {
    assert_eq!(states.len(), limits.len(), "one state per limit");
    for (s, l) in states.iter_mut().zip(limits) {
        s.refund(&l.quota, now, cost);
    }
}

/// Charges `cost` on every rule whatever their states (see [`State::force`])
/// and returns [`Decision::most_restrictive`] of the rules' numbers after it.
///
/// Panics like [`preview_all`] on mismatched or empty slices.
pub fn force_all(states: &mut [State], limits: &[Limit], now: u64, cost: u64) -> Decision {
    assert_eq!(states.len(), limits.len(), "one state per limit");
    states
        .iter_mut()
        .zip(limits)
        .map(|(s, l)| s.force(&l.quota, now, cost))
        .reduce(Decision::most_restrictive)
        .expect("at least one limit")
}

/// Admits and charges, on every rule at once, the largest `k <= max` that
/// every rule admits at `now` (see [`State::lease`]). Refused, charging
/// nothing, if any rule is a sliding log.
///
/// Panics like [`preview_all`] on mismatched or empty slices.
pub fn lease_all(
    states: &mut [State],
    limits: &[Limit],
    now: u64,
    max: u64,
) -> Result<Lease, LeaseError> {
    assert_eq!(states.len(), limits.len(), "one state per limit");
    if limits.iter().any(|l| l.algorithm == Algorithm::SlidingLog) {
        return Err(LeaseError::NotLeasable(Algorithm::SlidingLog));
    }
    // Admission is monotone in the cost on every rule, so the largest cost
    // all admit is the smallest `remaining`: what `preview_all` reports.
    Ok(grant(
        states,
        max,
        |s, cost| preview_all(s, limits, now, cost),
        |s, cost| decide_all(s, limits, now, cost),
    ))
}
