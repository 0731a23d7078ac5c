//! A 16-byte key for the bucket family: the time of the key's last change
//! and the capacity in use at that time.
//!
//! The token bucket, GCRA, the leaky meter and the leaky queue all reduce a
//! key to one quantity in ticks as of its last change (the *debt*: tokens
//! missing, TAT ahead of that time, level, queue). Their own states store it
//! as a 128-bit tick count, because GCRA's TAT and the queue's next free
//! slot are absolute times in ticks (ns times the limit, about 94 bits).
//! Stored relative to the last change instead, the debt never exceeds one
//! burst plus one emission interval, `(burst + 1) × period` ticks, so
//! whenever that fits 64 bits ([`Compact::fits`], true for every everyday
//! quota) a key takes 16 bytes instead of 24.
//!
//! [`Compact`] converts to the algorithm's own state around every
//! operation, so its decisions are the core's by construction, bit for bit.
//!
//! ```
//! use tollgate_core::algorithms::Gcra;
//! use tollgate_core::{AlgorithmState, Compact, Quota};
//!
//! let quota = Quota::per_minute(100).unwrap();
//! assert!(Compact::<Gcra>::fits(&quota));
//! let mut small = Compact::<Gcra>::new(&quota);
//! let mut wide = Gcra::new(&quota);
//! for t in [0, 1, 600_000_000, 700_000_000] {
//!     assert_eq!(small.decide(&quota, t, 60), wide.decide(&quota, t, 60));
//! }
//! assert_eq!(std::mem::size_of_val(&small), 16);
//! ```

use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;

use crate::algorithms::{bucket, AlgorithmState, Gcra, LeakyBucket, LeakyQueue, Step, TokenBucket};
use crate::{Decision, Quota};

mod sealed {
    pub trait Sealed {}
}

/// An algorithm whose key is one debt in ticks as of its last change: the
/// token bucket, GCRA, the leaky meter and the leaky queue.
pub trait Bucket: AlgorithmState + Copy + sealed::Sealed {
    /// The capacity in use at the key's last change, in ticks.
    fn debt_at_last(&self, quota: &Quota) -> u128;
    /// The key whose last change was at `last`, with `debt` ticks in use then.
    fn from_debt(quota: &Quota, last: u64, debt: u128) -> Self;
    /// The decision on a request of `cost` at `now` for the compact key,
    /// and the key after charging it (unchanged when refused or a peek).
    /// By default through the algorithm's own state.
    #[inline(always)]
    fn step_compact(
        key: &Compact<Self>,
        quota: &Quota,
        now: u64,
        cost: u64,
    ) -> (Decision, Compact<Self>) {
        let mut state = key.to_state(quota);
        let decision = state.decide(quota, now, cost);
        (decision, Compact::from_state(&state, quota))
    }
}

/// The meters (token bucket, GCRA, leaky meter) decide on the debt alone,
/// drained by the time since the last change: the same integers as their
/// own states, without the round trip through a 128-bit absolute time.
/// `$owing` builds the meter owing a debt at a time.
macro_rules! meter {
    ($meter:ident, |$quota:ident, $last:ident, $debt:ident| $owing:expr) => {
        impl sealed::Sealed for $meter {}
        impl Bucket for $meter {
            #[inline(always)]
            fn debt_at_last(&self, quota: &Quota) -> u128 {
                self.debt(quota, self.last_update()).1
            }

            #[inline(always)]
            fn from_debt($quota: &Quota, $last: u64, $debt: u128) -> Self {
                $owing
            }

            #[inline(always)]
            fn step_compact(
                key: &Compact<Self>,
                quota: &Quota,
                now: u64,
                cost: u64,
            ) -> (Decision, Compact<Self>) {
                let now = now.max(key.last);
                let debt = u128::from(key.debt).saturating_sub(quota.ticks(now - key.last));
                let (decision, after) = bucket::decide(quota, debt, cost);
                if decision.allowed && cost > 0 {
                    (decision, Compact::from_parts(now, after))
                } else {
                    (decision, *key)
                }
            }
        }
    };
}

meter!(Gcra, |quota, last, debt| Gcra::owing(quota, last, debt));
meter!(TokenBucket, |quota, last, debt| TokenBucket::owing(
    quota, last, debt
));
meter!(LeakyBucket, |_quota, last, debt| LeakyBucket::owing(
    last, debt
));

impl sealed::Sealed for LeakyQueue {}
impl Bucket for LeakyQueue {
    #[inline(always)]
    fn debt_at_last(&self, quota: &Quota) -> u128 {
        self.wait(quota, self.last_update()).2
    }

    #[inline(always)]
    fn from_debt(quota: &Quota, last: u64, debt: u128) -> Self {
        LeakyQueue::queued(last, quota.ticks(last), debt)
    }
}

/// The state of a bucket-family key in 16 bytes: the time of its last
/// change and its debt then, in ticks.
///
/// Meant for quotas where [`Compact::fits`] holds: every decision, refund
/// and lease then stays in range. A forced charge ([`AlgorithmState::force`])
/// may leave any debt; beyond `u64::MAX` ticks (at 100 a minute, more than
/// 300 million requests owed) the compact key keeps `u64::MAX`, so it is
/// refused for about 10 years of refill where its own state would wait
/// longer. Every other number stays the core's.
pub struct Compact<S> {
    last: u64,
    debt: u64,
    algorithm: PhantomData<fn() -> S>,
}

impl<S: Bucket> Compact<S> {
    /// Whether every key under `quota` fits: `(burst + 1) × period` ticks
    /// (the most a key can owe after any decision) fit 64 bits.
    pub fn fits(quota: &Quota) -> bool {
        quota.burst_ticks() + quota.cost_ticks(1) <= u64::MAX as u128
    }

    /// The compact form of `state` under `quota` (see [`Compact::fits`]).
    #[inline(always)]
    pub fn from_state(state: &S, quota: &Quota) -> Self {
        Compact::from_parts(state.last_update(), state.debt_at_last(quota))
    }

    #[inline(always)]
    fn from_parts(last: u64, debt: u128) -> Self {
        Compact {
            last,
            debt: u64::try_from(debt).unwrap_or(u64::MAX),
            algorithm: PhantomData,
        }
    }

    /// The algorithm's own state.
    #[inline(always)]
    pub fn to_state(&self, quota: &Quota) -> S {
        S::from_debt(quota, self.last, u128::from(self.debt))
    }
}

impl<S: Bucket> Step for Compact<S> {
    fn fresh(quota: &Quota) -> Self {
        Compact::from_state(&S::new(quota), quota)
    }

    #[inline(always)]
    fn step(&self, quota: &Quota, now: u64, cost: u64) -> (Decision, Self) {
        S::step_compact(self, quota, now, cost)
    }

    fn refunded(&self, quota: &Quota, now: u64, cost: u64) -> Self {
        let mut state = self.to_state(quota);
        state.refund(quota, now, cost);
        Compact::from_state(&state, quota)
    }

    fn forced(&self, quota: &Quota, now: u64, cost: u64) -> Self {
        let mut state = self.to_state(quota);
        state.force(quota, now, cost);
        Compact::from_state(&state, quota)
    }

    fn last(&self) -> u64 {
        self.last
    }
}

// By hand: derives would ask `S` for each trait, though only the two words
// are stored.
impl<S> Clone for Compact<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for Compact<S> {}

impl<S> PartialEq for Compact<S> {
    fn eq(&self, other: &Self) -> bool {
        (self.last, self.debt) == (other.last, other.debt)
    }
}

impl<S> Eq for Compact<S> {}

impl<S> Hash for Compact<S> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.last, self.debt).hash(state);
    }
}

impl<S> fmt::Debug for Compact<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compact")
            .field("last", &self.last)
            .field("debt", &self.debt)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixteen_bytes() {
        assert_eq!(std::mem::size_of::<Compact<Gcra>>(), 16);
        assert_eq!(std::mem::size_of::<Compact<LeakyQueue>>(), 16);
    }

    #[test]
    fn fits_everyday_quotas_but_not_the_widest() {
        let per_minute = Quota::per_minute(100).unwrap();
        assert!(Compact::<Gcra>::fits(&per_minute));
        // 10^12 per 146 years with an equal burst: 10^12 × 2^62 ticks.
        let widest =
            Quota::with_parts(Quota::MAX_LIMIT, Quota::MAX_SPAN_NS, Quota::MAX_LIMIT).unwrap();
        assert!(!Compact::<Gcra>::fits(&widest));
    }
}
