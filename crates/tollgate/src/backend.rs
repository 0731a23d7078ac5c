use std::future::Future;
use std::time::Duration;

use tollgate_core::{Algorithm, Decision, Lease, LeaseError};

use crate::Policy;

/// A store of per-key state (process memory, Redis) that decides
/// requests with the exact semantics of `docs/SEMANTICS.md`.
///
/// Implementations decide with their own clock (the store's, for shared
/// stores), apply all of a policy's limits atomically, and never hang: every
/// call that leaves the process has a deadline and reports a typed error, so
/// the layer above can fail open, fail closed or fall back.
pub trait Backend: Send + Sync {
    /// Refuses a policy this store cannot enforce exactly (for example a
    /// quota outside the range its arithmetic is exact for), so the error
    /// comes when the policy is set up rather than at the first request.
    fn validate(&self, policy: &Policy) -> Result<(), BackendError> {
        let _ = policy;
        Ok(())
    }

    /// Decides a request of `cost` for `key` against every limit of `policy`,
    /// atomically, and charges it if admitted. Cost 0 is a peek.
    fn check(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send;

    /// Forgets `key`'s state under `policy`, as if it had never been seen.
    fn reset(
        &self,
        key: &str,
        policy: &Policy,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Gives `cost` back to `key` on every limit, atomically: the exact
    /// inverse of a charge of `cost` made now, capped so the key never ends
    /// with more room than a fresh key (see [`State::refund`]). For a
    /// request admitted by this policy and then not carried out. Returns the
    /// key's numbers after it (`allowed` true).
    ///
    /// [`State::refund`]: tollgate_core::State::refund
    fn refund(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send;

    /// Charges `cost` to `key` on every limit whatever its state, atomically:
    /// never denies, and may leave the key in debt, denied (with an exact
    /// `retry_after`) until the debt is repaid (see [`State::force`]). For
    /// a cost known only once the work is done. Returns the key's numbers
    /// after it (`allowed` true).
    ///
    /// [`State::force`]: tollgate_core::State::force
    fn force(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send;

    /// Admits and charges, atomically on every limit, the largest cost
    /// `k <= max` the key admits now, for an instance that spends the `k`
    /// units locally and refunds what it does not use (see
    /// [`State::lease`]). A policy with a sliding log is refused with
    /// [`BackendError::UnsupportedPolicy`].
    ///
    /// [`State::lease`]: tollgate_core::State::lease
    fn lease(
        &self,
        key: &str,
        policy: &Policy,
        max: u64,
    ) -> impl Future<Output = Result<Lease, BackendError>> + Send;
}

/// One of the [`Backend`] operations that change a key, with its amount:
/// the vocabulary shared stores use to send any of them through one
/// server-side entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// [`Backend::check`] of this cost (0 peeks).
    Check(u64),
    /// [`Backend::refund`] of this cost.
    Refund(u64),
    /// [`Backend::force`] of this cost.
    Force(u64),
    /// [`Backend::lease`] of at most this cost.
    Lease(u64),
}

impl Operation {
    /// Refuses, before any store is asked, what no store can do: a lease of
    /// a policy with a sliding log (whose timestamps cannot be charged ahead
    /// of the requests).
    pub fn supported_by(self, policy: &Policy) -> Result<(), BackendError> {
        let log = |l: &tollgate_core::Limit| l.algorithm == Algorithm::SlidingLog;
        if matches!(self, Operation::Lease(_)) && policy.limits().iter().any(log) {
            let refused = LeaseError::NotLeasable(Algorithm::SlidingLog);
            return Err(BackendError::UnsupportedPolicy(refused.to_string()));
        }
        Ok(())
    }
}

/// Why a store could not decide. Distinct kinds so a caller can choose per
/// kind whether to fail open, fail closed or fall back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The store was reached but did not answer within the call's deadline.
    /// The call may still have been carried out (a charge made after the
    /// deadline passed): never refund after a timeout.
    #[error("store did not answer within {0:?}")]
    Timeout(Duration),
    /// No connection to the store could be made or kept (refused, reset,
    /// closed).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store refused the credentials (wrong or missing password or
    /// user).
    #[error("store refused the credentials: {0}")]
    Unauthorized(String),
    /// The store answered with an error (for example a failed script).
    #[error("store error: {0}")]
    Store(String),
    /// The client is set up wrong (a malformed URL, an unsupported scheme,
    /// a TLS server whose certificate it does not trust): a fix on this
    /// side, not in the store.
    #[error("store client configuration: {0}")]
    Config(String),
    /// The policy cannot be enforced by this store (for example a quota
    /// outside the range its arithmetic is exact for).
    #[error("policy not supported by this store: {0}")]
    UnsupportedPolicy(String),
    /// The key was refused (for example empty).
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// The operation would take the key's state beyond the range the store
    /// computes exactly (for example a forced charge that large); nothing
    /// was changed.
    #[error("out of the store's exact range: {0}")]
    OutOfRange(String),
}

/// A shared reference to a backend (`&B`, `Arc<B>`, `Box<B>`) is a backend,
/// so several stores can share one connection pool or one keyed map.
impl<P> Backend for P
where
    P: std::ops::Deref + Send + Sync,
    P::Target: Backend,
{
    fn validate(&self, policy: &Policy) -> Result<(), BackendError> {
        (**self).validate(policy)
    }

    fn check(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send {
        (**self).check(key, policy, cost)
    }

    fn reset(
        &self,
        key: &str,
        policy: &Policy,
    ) -> impl Future<Output = Result<(), BackendError>> + Send {
        (**self).reset(key, policy)
    }

    fn refund(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send {
        (**self).refund(key, policy, cost)
    }

    fn force(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send {
        (**self).force(key, policy, cost)
    }

    fn lease(
        &self,
        key: &str,
        policy: &Policy,
        max: u64,
    ) -> impl Future<Output = Result<Lease, BackendError>> + Send {
        (**self).lease(key, policy, max)
    }
}
