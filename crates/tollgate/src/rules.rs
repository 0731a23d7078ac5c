//! What a limiter stores per key and how it asks the core to decide.
//!
//! A policy of one limit stores the algorithm's own state type (24 bytes for
//! GCRA rather than the 56 of the `State` enum, which must make room for the
//! sliding log); a policy of several limits stores one [`State`] per limit and
//! decides with [`decide_all`]. Either way every decision is the core's.

use std::marker::PhantomData;

use tollgate_core::{
    decide_all, force_all, lease_all, preview_all, refund_all, AlgorithmState, Decision, Lease,
    LeaseError, Limit, Quota, State,
};

/// The rules a keyed table enforces, with the per-key state they need.
pub(crate) trait Rules: Send + Sync {
    /// Per-key state.
    type State: Clone + Send + Sync;
    /// The state of a key never seen.
    fn fresh(&self) -> Self::State;
    /// Decides and charges if admitted (all limits or none).
    fn decide(&self, state: &mut Self::State, now: u64, cost: u64) -> Decision;
    /// What `decide` would say, without charging.
    fn preview(&self, state: &Self::State, now: u64, cost: u64) -> Decision;
    /// Whether the key is back to its initial state at `now`.
    fn is_idle(&self, state: &Self::State, now: u64) -> bool;
    /// Gives back `cost` on every limit, capped at a fresh key.
    fn refund(&self, state: &mut Self::State, now: u64, cost: u64);
    /// Charges `cost` on every limit whatever the state.
    fn force(&self, state: &mut Self::State, now: u64, cost: u64) -> Decision;
    /// Charges the largest cost up to `max` every limit admits.
    fn lease(&self, state: &mut Self::State, now: u64, max: u64) -> Result<Lease, LeaseError>;
    /// The key's own clock: the latest time any of its limits changed.
    fn last_update(&self, state: &Self::State) -> u64;
}

/// One limit, stored as its algorithm's own state type `S`.
pub(crate) struct One<S> {
    quota: Quota,
    state: PhantomData<fn() -> S>,
}

impl<S> One<S> {
    pub(crate) fn new(quota: Quota) -> Self {
        One {
            quota,
            state: PhantomData,
        }
    }
}

impl<S: AlgorithmState + Clone + Send + Sync> Rules for One<S> {
    type State = S;

    #[inline]
    fn fresh(&self) -> S {
        S::new(&self.quota)
    }

    // Inlined into the lookup so the decision stays in registers instead
    // of going through memory (a store-forwarding stall measured at a
    // quarter of a check).
    #[inline(always)]
    fn decide(&self, state: &mut S, now: u64, cost: u64) -> Decision {
        state.decide(&self.quota, now, cost)
    }

    #[inline]
    fn preview(&self, state: &S, now: u64, cost: u64) -> Decision {
        state.preview(&self.quota, now, cost)
    }

    fn is_idle(&self, state: &S, now: u64) -> bool {
        state.is_idle(&self.quota, now)
    }

    fn refund(&self, state: &mut S, now: u64, cost: u64) {
        state.refund(&self.quota, now, cost)
    }

    fn force(&self, state: &mut S, now: u64, cost: u64) -> Decision {
        state.force(&self.quota, now, cost)
    }

    fn lease(&self, state: &mut S, now: u64, max: u64) -> Result<Lease, LeaseError> {
        state.lease(&self.quota, now, max)
    }

    #[inline]
    fn last_update(&self, state: &S) -> u64 {
        state.last_update()
    }
}

/// Several limits on one key, decided atomically by the core's `decide_all`.
pub(crate) struct All {
    limits: Box<[Limit]>,
}

impl All {
    pub(crate) fn new(limits: &[Limit]) -> Self {
        All {
            limits: limits.into(),
        }
    }
}

impl Rules for All {
    type State = Box<[State]>;

    fn fresh(&self) -> Box<[State]> {
        self.limits
            .iter()
            .map(|l| State::new(l.algorithm, &l.quota))
            .collect()
    }

    fn decide(&self, state: &mut Box<[State]>, now: u64, cost: u64) -> Decision {
        decide_all(state, &self.limits, now, cost)
    }

    fn preview(&self, state: &Box<[State]>, now: u64, cost: u64) -> Decision {
        preview_all(state, &self.limits, now, cost)
    }

    fn is_idle(&self, state: &Box<[State]>, now: u64) -> bool {
        state
            .iter()
            .zip(self.limits.iter())
            .all(|(s, l)| s.is_idle(&l.quota, now))
    }

    fn refund(&self, state: &mut Box<[State]>, now: u64, cost: u64) {
        refund_all(state, &self.limits, now, cost)
    }

    fn force(&self, state: &mut Box<[State]>, now: u64, cost: u64) -> Decision {
        force_all(state, &self.limits, now, cost)
    }

    fn lease(&self, state: &mut Box<[State]>, now: u64, max: u64) -> Result<Lease, LeaseError> {
        lease_all(state, &self.limits, now, max)
    }

    fn last_update(&self, state: &Box<[State]>) -> u64 {
        state.iter().map(State::last_update).max().unwrap_or(0)
    }
}
