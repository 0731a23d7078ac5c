//! [`Store`]: one policy over any [`Backend`], the async face of tollgate.

use tollgate_core::Decision;

use crate::{Backend, BackendError, Policy};

/// A policy enforced through a [`Backend`]: process memory or Redis.
/// Switching stores changes only the line that builds the
/// backend:
///
/// ```
/// # async fn demo() -> Result<(), tollgate::BackendError> {
/// use tollgate::{Algorithm, Limit, MemoryBackend, Quota, Store};
///
/// let policy = Limit::new(Algorithm::Gcra, Quota::per_second(10).unwrap());
/// let store = Store::new(policy, MemoryBackend::new())?;
/// // let store = Store::new(policy, RedisBackend::connect("redis://127.0.0.1:6379").await?)?;
/// let decision = store.check("user-1", 1).await?;
/// assert!(decision.allowed);
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(demo()).unwrap();
/// ```
pub struct Store<B> {
    policy: Policy,
    backend: B,
}

impl<B: Backend> Store<B> {
    /// `policy` (a [`Limit`](crate::Limit) or several) enforced in `backend`;
    /// refused if the backend cannot enforce it exactly.
    pub fn new(policy: impl Into<Policy>, backend: B) -> Result<Self, BackendError> {
        let policy = policy.into();
        backend.validate(&policy)?;
        Ok(Store { policy, backend })
    }

    /// Decides `cost` for `key` and charges it if admitted (all limits or
    /// none), with the store's clock. Cost 0 is a peek.
    pub async fn check(&self, key: &str, cost: u64) -> Result<Decision, BackendError> {
        self.backend.check(key, &self.policy, cost).await
    }

    /// The key's current numbers, changing nothing.
    pub async fn peek(&self, key: &str) -> Result<Decision, BackendError> {
        self.check(key, 0).await
    }

    /// Forgets `key`.
    pub async fn reset(&self, key: &str) -> Result<(), BackendError> {
        self.backend.reset(key, &self.policy).await
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }
}
