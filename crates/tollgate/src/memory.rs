//! [`MemoryBackend`]: the in-process store behind the [`Backend`] trait.

use std::collections::HashMap;
use std::future::{ready, Future};
use std::sync::Arc;

use parking_lot::RwLock;
use tollgate_core::{Decision, Lease};

use crate::{Backend, BackendError, Clock, Limiter, MonotonicClock, Policy};

/// Process memory as a [`Backend`]: one [`Limiter`] per policy, created on
/// first use, so the async layers above (the [`Store`](crate::Store)
/// facade) can take memory or Redis alike.
///
/// Code that only ever limits in process should call a [`Limiter`]
/// directly: it is synchronous and skips the policy lookup.
pub struct MemoryBackend<C = MonotonicClock> {
    clock: C,
    limiters: RwLock<HashMap<Policy, Arc<Limiter<String, C>>>>,
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
            limiters: RwLock::new(HashMap::new()),
        }
    }

    /// The limiter holding `policy`'s keys.
    pub fn limiter(&self, policy: &Policy) -> Arc<Limiter<String, C>> {
        if let Some(limiter) = self.limiters.read().get(policy) {
            return Arc::clone(limiter);
        }
        let mut limiters = self.limiters.write();
        let limiter = limiters.entry(policy.clone()).or_insert_with(|| {
            Arc::new(
                Limiter::builder(policy.clone())
                    .clock(self.clock.clone())
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

impl<C: Clock + Clone> Backend for MemoryBackend<C> {
    fn check(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send {
        ready(valid(key).map(|key| self.limiter(policy).check_cost(key, cost)))
    }

    fn reset(
        &self,
        key: &str,
        policy: &Policy,
    ) -> impl Future<Output = Result<(), BackendError>> + Send {
        ready(valid(key).map(|key| {
            self.limiter(policy).reset(key);
        }))
    }

    fn refund(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send {
        ready(valid(key).map(|key| self.limiter(policy).refund(key, cost)))
    }

    fn force(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send {
        ready(valid(key).map(|key| self.limiter(policy).force(key, cost)))
    }

    fn lease(
        &self,
        key: &str,
        policy: &Policy,
        max: u64,
    ) -> impl Future<Output = Result<Lease, BackendError>> + Send {
        ready(valid(key).and_then(|key| {
            self.limiter(policy)
                .lease(key, max)
                .map_err(|e| BackendError::UnsupportedPolicy(e.to_string()))
        }))
    }
}
