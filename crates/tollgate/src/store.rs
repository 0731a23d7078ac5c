//! [`Store`]: one policy over any [`Backend`], the async face of tollgate.

use tollgate_core::{Decision, Lease};

use crate::{Backend, BackendError, BackendExt, Operation, Outcome, Policy};

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
/// let decision = store.check("user-1").await?;
/// assert!(decision.allowed);
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(demo()).unwrap();
/// ```
pub struct Store<B: Backend> {
    policy: Policy,
    prepared: B::Prepared,
    backend: B,
}

impl<B: Backend> Store<B> {
    /// `policy` (a [`Limit`](crate::Limit) or several) enforced in `backend`;
    /// refused if the backend cannot enforce it exactly.
    pub fn new(policy: impl Into<Policy>, backend: B) -> Result<Self, BackendError> {
        let policy = policy.into();
        let prepared = backend.prepare(&policy)?;
        Ok(Store {
            policy,
            prepared,
            backend,
        })
    }

    /// Decides a request for `key` (cost 1) and charges it if admitted,
    /// with the store's clock.
    pub async fn check(&self, key: &str) -> Result<Decision, BackendError> {
        self.check_cost(key, 1).await
    }

    /// Decides `cost` for `key` and charges it if admitted (all limits or
    /// none), with the store's clock. Cost 0 is a peek.
    pub async fn check_cost(&self, key: &str, cost: u64) -> Result<Decision, BackendError> {
        self.backend.check(key, &self.prepared, cost).await
    }

    /// The key's current numbers, changing nothing.
    pub async fn peek(&self, key: &str) -> Result<Decision, BackendError> {
        self.check_cost(key, 0).await
    }

    /// Forgets `key`.
    pub async fn reset(&self, key: &str) -> Result<(), BackendError> {
        self.backend.reset(key, &self.prepared).await
    }

    /// Gives `cost` back to `key` (see [`BackendExt::refund`]): for a request
    /// admitted and then not carried out. Refund only what is known to have
    /// been charged: after a timeout the charge may or may not have been
    /// made.
    pub async fn refund(&self, key: &str, cost: u64) -> Result<Decision, BackendError> {
        self.backend.refund(key, &self.prepared, cost).await
    }

    /// Charges `cost` to `key` whatever its state (see [`BackendExt::force`]):
    /// for a cost known only after the work, such as the tokens of a reply.
    pub async fn force(&self, key: &str, cost: u64) -> Result<Decision, BackendError> {
        self.backend.force(key, &self.prepared, cost).await
    }

    /// Charges the largest cost up to `max` that `key` admits now (see
    /// [`BackendExt::lease`]), to spend locally; refund what goes unused.
    pub async fn lease(&self, key: &str, max: u64) -> Result<Lease, BackendError> {
        self.backend.lease(key, &self.prepared, max).await
    }

    /// Carries out any [`Operation`] on `key` (see [`Backend::apply`]).
    pub async fn apply(&self, key: &str, op: Operation) -> Result<Outcome, BackendError> {
        self.backend.apply(key, &self.prepared, op).await
    }

    /// The policy as the backend prepared it.
    pub fn prepared(&self) -> &B::Prepared {
        &self.prepared
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
