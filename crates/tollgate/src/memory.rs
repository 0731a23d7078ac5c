//! [`MemoryBackend`]: the in-process store behind the [`Backend`] trait.

use std::collections::HashMap;
use std::future::{ready, Future};
use std::sync::Arc;

use crate::{
    Backend, BackendError, Clock, CompactKey, KeyStr, Limiter, MonotonicClock, Operation, Outcome,
    Policy,
};
use parking_lot::RwLock;

/// Process memory as a [`Backend`]: one [`Limiter`] per policy, created on
/// first use, so the async layers above (the [`Store`](crate::Store)
/// facade) can take memory or Redis alike.
///
/// [`Backend::prepare`] finds (or makes) the policy's limiter once; every
/// call after goes straight to it. Code that only ever limits in process
/// may as well call a [`Limiter`] directly: it is synchronous.
pub struct MemoryBackend<C = MonotonicClock> {
    clock: C,
    /// Each policy's limiter holds at most this many keys.
    max_keys: usize,
    limiters: RwLock<HashMap<Policy, Arc<Limiter<CompactKey, C>>>>,
}

impl MemoryBackend {
    /// An empty store on the default monotonic clock.
    pub fn new() -> Self {
        MemoryBackend::with_clock(MonotonicClock::new())
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        MemoryBackend::new()
    }
}

impl<C: Clock + Clone> MemoryBackend<C> {
    /// An empty store on `clock` (shared by the limiters of every policy).
    pub fn with_clock(clock: C) -> Self {
        MemoryBackend {
            clock,
            max_keys: usize::MAX,
            limiters: RwLock::new(HashMap::new()),
        }
    }

    /// Holds at most `max_keys` keys per policy (see
    /// [`LimiterBuilder::max_keys`](crate::LimiterBuilder::max_keys): an idle
    /// key is evicted for a new one, and if none is idle the keys left out
    /// share one budget); unbounded by default. Set it before the first
    /// decision: limiters already created keep their bound.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// Forgets the idle keys of every policy (see [`Limiter::sweep`]), one
    /// shard at a time; returns how many it removed. Call it from a timer
    /// to give memory back when no new keys come.
    pub fn sweep(&self) -> usize {
        let limiters: Vec<_> = self.limiters.read().values().cloned().collect();
        limiters.iter().map(|l| l.sweep()).sum()
    }

    /// Keys held now, over every policy.
    pub fn len(&self) -> usize {
        self.limiters.read().values().map(|l| l.len()).sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The limiter holding `policy`'s keys.
    pub fn limiter(&self, policy: &Policy) -> Arc<Limiter<CompactKey, C>> {
        if let Some(limiter) = self.limiters.read().get(policy) {
            return Arc::clone(limiter);
        }
        let mut limiters = self.limiters.write();
        let limiter = limiters.entry(policy.clone()).or_insert_with(|| {
            Arc::new(
                Limiter::builder(policy.clone())
                    .clock(self.clock.clone())
                    .max_keys(self.max_keys)
                    .build(),
            )
        });
        Arc::clone(limiter)
    }
}

fn valid(key: &str) -> Result<&str, BackendError> {
    if key.is_empty() {
        return Err(BackendError::InvalidKey("the key is empty".into()));
    }
    Ok(key)
}

impl<C: Clock + Clone + 'static> Backend for MemoryBackend<C> {
    /// The policy's limiter: found or made once, then used directly.
    type Prepared = Arc<Limiter<CompactKey, C>>;

    /// Every operation is decided in the call, with no I/O to wait for.
    fn decides_at_once(&self) -> bool {
        true
    }

    fn prepare(&self, policy: &Policy) -> Result<Self::Prepared, BackendError> {
        Ok(self.limiter(policy))
    }

    fn apply(
        &self,
        key: &str,
        limiter: &Self::Prepared,
        op: Operation,
    ) -> impl Future<Output = Result<Outcome, BackendError>> + Send {
        ready(valid(key).and_then(|key| {
            let key = KeyStr::new(key);
            Ok(match op {
                Operation::Check(cost) => Outcome::Decided(limiter.check_cost(key, cost)),
                Operation::Refund(cost) => Outcome::Decided(limiter.refund(key, cost)),
                Operation::Force(cost) => Outcome::Decided(limiter.force(key, cost)),
                Operation::Lease(max) => Outcome::Leased(
                    limiter
                        .lease(key, max)
                        .map_err(|e| BackendError::UnsupportedPolicy(e.to_string()))?,
                ),
                Operation::Reset => {
                    limiter.reset(key);
                    Outcome::Reset
                }
            })
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Algorithm, BackendExt, FakeClock, Limit, Quota};

    #[test]
    fn keys_are_bounded_and_idle_ones_swept() {
        let clock = FakeClock::new();
        let backend = MemoryBackend::with_clock(clock.clone()).max_keys(2);
        let policy = Policy::new(Limit::new(Algorithm::Gcra, Quota::per_second(10).unwrap()));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let policy = backend.prepare(&policy).unwrap();
        for key in ["a", "b", "c", "d"] {
            rt.block_on(backend.check(key, &policy, 1)).unwrap();
        }
        assert_eq!(backend.len(), 2, "a flood of keys stays within the bound");
        // Back to full, but within the default idle grace (10 s): kept.
        clock.advance(Duration::from_secs(5));
        assert_eq!(backend.sweep(), 0, "idle keys are kept for the grace");
        // Past the grace.
        clock.advance(Duration::from_secs(6));
        assert_eq!(backend.sweep(), 2);
        assert!(backend.is_empty());
    }

    #[test]
    fn preparing_a_policy_again_finds_the_same_keys() {
        let backend = MemoryBackend::with_clock(FakeClock::new());
        let limit = Limit::new(Algorithm::FixedWindow, Quota::per_second(1).unwrap());
        let first = backend.prepare(&Policy::new(limit)).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(rt.block_on(backend.check("k", &first, 1)).unwrap().allowed);
        // A reloaded configuration prepares its policies again.
        let again = backend.prepare(&Policy::new(limit)).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert!(!rt.block_on(backend.check("k", &again, 1)).unwrap().allowed);
        assert!(matches!(
            rt.block_on(backend.check("", &again, 1)),
            Err(BackendError::InvalidKey(_))
        ));
    }
}
