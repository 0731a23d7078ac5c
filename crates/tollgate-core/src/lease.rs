//! Leases: the largest cost a key admits now, charged in one step, for an
//! instance that spends it locally.

use std::fmt;

use crate::{Algorithm, Decision};

/// What a lease granted: `granted` units charged at once (0 if none fit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    /// Units charged, at most the `max` asked for.
    pub granted: u64,
    /// The decision of charging `granted` units (`allowed`, numbers after
    /// the charge). When nothing was granted: the decision on one unit,
    /// denied, whose `retry_after` says when to lease again (a peek when
    /// the lease asked for 0).
    pub decision: Decision,
}

/// Why a lease was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaseError {
    /// The algorithm cannot be leased. The sliding log needs the time of
    /// every request in one place, so units spent elsewhere would escape it.
    NotLeasable(Algorithm),
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseError::NotLeasable(algorithm) => write!(
                f,
                "{algorithm} cannot lease: it needs the time of every request in one \
                 place; decide each request in the store, or use another algorithm"
            ),
        }
    }
}

impl std::error::Error for LeaseError {}

/// Grants `min(max, remaining)` units through `decide`, reading `remaining`
/// (exact: the largest cost admitted now) from a peek through `preview`.
pub(crate) fn grant<S: ?Sized>(
    state: &mut S,
    max: u64,
    preview: impl Fn(&S, u64) -> Decision,
    decide: impl FnOnce(&mut S, u64) -> Decision,
) -> Lease {
    let granted = max.min(preview(state, 0).remaining);
    if granted == 0 {
        return Lease {
            granted,
            decision: preview(state, max.min(1)),
        };
    }
    let decision = decide(state, granted);
    debug_assert!(decision.allowed, "remaining is exact");
    Lease { granted, decision }
}
