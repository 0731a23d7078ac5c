//! One module per algorithm, each a small per-key state with the exact rules
//! of `docs/SEMANTICS.md`.
//!
//! Every state records the time of its last charge and treats an earlier
//! `now` as that time, so a key's clock never runs backwards. Denials and
//! peeks (cost 0) change nothing, which is what makes [`AlgorithmState::preview`]
//! and [`AlgorithmState::decide`] agree and multi-rule decisions atomic.

pub(crate) mod bucket;
pub mod fixed_window;
pub mod gcra;
pub mod leaky_bucket;
pub mod leaky_queue;
pub mod sliding_counter;
pub mod sliding_log;
pub mod token_bucket;

pub use fixed_window::FixedWindow;
pub use gcra::Gcra;
pub use leaky_bucket::LeakyBucket;
pub use leaky_queue::LeakyQueue;
pub use sliding_counter::SlidingCounter;
pub use sliding_log::SlidingLog;
pub use token_bucket::TokenBucket;

use crate::lease::grant;
use crate::{Decision, Lease, LeaseError, Quota};

/// The per-key state of one algorithm.
///
/// The quota passed to each call must be the one the state was created
/// with; a different one gives well-defined but meaningless numbers (never a
/// panic).
pub trait AlgorithmState: Sized {
    /// The state of a key that has never been seen.
    fn new(quota: &Quota) -> Self;

    /// The decision `decide` would make, without applying it.
    fn preview(&self, quota: &Quota, now: u64, cost: u64) -> Decision;

    /// Decides on a request of `cost` at `now` (ns) and charges it if admitted.
    fn decide(&mut self, quota: &Quota, now: u64, cost: u64) -> Decision;

    /// Whether the key, left alone until `now`, is back to its initial state
    /// (so a store may forget it).
    fn is_idle(&self, quota: &Quota, now: u64) -> bool {
        self.preview(quota, now, 0).reset_after == 0
    }

    /// Gives back `cost` of the most recent charges still counted at `now`,
    /// as a charge of `-cost` at `now` would: for a request that was admitted
    /// but never sent. Capped, so a key never ends up with more room than a
    /// fresh key has.
    fn refund(&mut self, quota: &Quota, now: u64, cost: u64);

    /// Charges `cost` at `now` whatever the state, and returns the key's
    /// numbers right after (`allowed` is true): for a cost known only once
    /// the work is done. The key may go past its capacity: a bucket or the
    /// queue into debt, a window's count beyond `limit`. It is then denied,
    /// with an exact `retry_after`, until the debt is repaid: by the refill
    /// for the bucket family and the queue, and for the windows by the
    /// forced cost leaving the window (at the fixed window's end, as the
    /// sliding counter's previous window fades, after one period in the log).
    fn force(&mut self, quota: &Quota, now: u64, cost: u64) -> Decision;

    /// Admits and charges the largest `k <= max` admitted at `now`, for an
    /// instance that spends the units locally and refunds what it does not
    /// use. The [`Lease`] holds `k` and the decision of charging `k`; when
    /// `k` is 0 the decision is that of one unit (denied, with the wait
    /// until one fits), or a peek when `max` is 0. The sliding log refuses
    /// ([`LeaseError`]).
    fn lease(&mut self, quota: &Quota, now: u64, max: u64) -> Result<Lease, LeaseError> {
        Ok(grant(
            self,
            max,
            |s, cost| s.preview(quota, now, cost),
            |s, cost| s.decide(quota, now, cost),
        ))
    }

    /// The key's own clock: the time of its latest change. An earlier `now`
    /// is treated as this time.
    fn last_update(&self) -> u64;
}

/// A `Copy` state written as one pure step: the decision and the state after
/// charging it. `preview` and `decide` follow from it.
pub(crate) trait Step: Copy {
    fn fresh(quota: &Quota) -> Self;
    fn step(&self, quota: &Quota, now: u64, cost: u64) -> (Decision, Self);
    /// The state after giving back `cost` at `now` (see [`AlgorithmState::refund`]).
    fn refunded(&self, quota: &Quota, now: u64, cost: u64) -> Self;
    /// The state after charging `cost` at `now` whatever it holds (see
    /// [`AlgorithmState::force`]).
    fn forced(&self, quota: &Quota, now: u64, cost: u64) -> Self;
    fn last(&self) -> u64;
}

impl<S: Step> AlgorithmState for S {
    #[inline]
    fn new(quota: &Quota) -> Self {
        S::fresh(quota)
    }

    // Always inlined: a store's lookup then keeps the decision in
    // registers (returned through memory, it measured a third slower).
    #[inline(always)]
    fn preview(&self, quota: &Quota, now: u64, cost: u64) -> Decision {
        self.step(quota, now, cost).0
    }

    #[inline(always)]
    fn decide(&mut self, quota: &Quota, now: u64, cost: u64) -> Decision {
        let (decision, next) = self.step(quota, now, cost);
        if decision.allowed && cost > 0 {
            *self = next;
        }
        decision
    }

    #[inline]
    fn refund(&mut self, quota: &Quota, now: u64, cost: u64) {
        if cost > 0 {
            *self = self.refunded(quota, now, cost);
        }
    }

    fn force(&mut self, quota: &Quota, now: u64, cost: u64) -> Decision {
        if cost > 0 {
            *self = self.forced(quota, now, cost);
        }
        self.preview(quota, now, 0)
    }

    #[inline]
    fn last_update(&self) -> u64 {
        self.last()
    }
}
