use std::future::Future;
use std::time::Duration;

use tollgate_core::Decision;

use crate::Policy;

/// A store of per-key state (process memory, Redis, PostgreSQL) that decides
/// requests with the exact semantics of `SPEC.md`.
///
/// Implementations decide with their own clock (the store's, for shared
/// stores), apply all of a policy's limits atomically, and never hang: every
/// call that leaves the process has a deadline and reports a typed error, so
/// the layer above can fail open, fail closed or fall back.
pub trait Backend: Send + Sync {
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
}

/// Why a store could not decide. Distinct kinds so a caller can choose per
/// kind whether to fail open, fail closed or fall back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The store did not answer within the call's deadline.
    #[error("store did not answer within {0:?}")]
    Timeout(Duration),
    /// No connection to the store could be made or kept.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store answered with an error (for example a failed script).
    #[error("store error: {0}")]
    Store(String),
    /// The policy cannot be enforced by this store (for example a quota
    /// outside the range its arithmetic is exact for).
    #[error("policy not supported by this store: {0}")]
    UnsupportedPolicy(String),
    /// The key was refused (for example empty).
    #[error("invalid key: {0}")]
    InvalidKey(String),
}

/// A shared reference to a backend is a backend, so several [`Store`]s
/// (one per policy) can use one connection pool.
///
/// [`Store`]: crate::Store
impl<B: Backend + ?Sized> Backend for &B {
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
}

/// An `Arc` of a backend is a backend, for stores shared across tasks.
impl<B: Backend + ?Sized> Backend for std::sync::Arc<B> {
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
}
