//! Several rules on one request, decided atomically: either every rule
//! admits and every rule is charged, or none is charged.

use crate::{Decision, Limit, State};

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
