use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;

use tollgate_core::{Algorithm, Decision, Lease, LeaseError};

use crate::Policy;

/// A store of per-key state (process memory, Redis) that decides
/// requests with the exact semantics of `docs/SEMANTICS.md`.
///
/// Implementations decide with their own clock (the store's, for shared
/// stores), apply all of a policy's limits atomically, and never hang: every
/// call that leaves the process has a deadline and reports a typed error, so
/// the layer above can fail open, fail closed or fall back.
///
/// The seam is two methods. [`Backend::prepare`] accepts a policy once,
/// where it is set up, and returns what the store needs to apply it (the
/// memory store's limiter, a shared store's checked policy), so the
/// request path does no lookup; [`Backend::apply`] carries out any
/// [`Operation`] with it. A wrapper (a deadline, batching, a test double)
/// forwards those two and nothing else; the typed calls (`check`, `refund`,
/// `force`, `lease`, `reset`) are written once, in [`BackendExt`].
pub trait Backend: Send + Sync {
    /// What the store keeps for a policy it accepted; cheap to clone, so a
    /// caller can keep one per rule.
    type Prepared: Clone + Send + Sync + 'static;

    /// True when every future [`Backend::apply`] returns is ready at its
    /// first poll, as a store in process memory's is: a caller may then
    /// poll it where it stands, on its own stack, instead of keeping it
    /// behind a pointer until it is woken, and a deadline on it would never
    /// fire. False unless a store says so. A method rather than a constant
    /// so that a wrapper over one of several stores chosen at start (the
    /// server's) can answer for the one it holds.
    fn decides_at_once(&self) -> bool {
        false
    }

    /// Accepts `policy`, or refuses it when this store cannot enforce it
    /// exactly (for example a quota outside the range its arithmetic is
    /// exact for), so the error comes when the policy is set up rather than
    /// at the first request. Preparing the same policy again gives the same
    /// state (a reloaded configuration keeps its counters).
    fn prepare(&self, policy: &Policy) -> Result<Self::Prepared, BackendError>;

    /// Carries out `op` for `key` under a prepared policy, atomically on
    /// every one of its limits. The [`Outcome`] matches the operation (see
    /// [`Operation`]).
    fn apply(
        &self,
        key: &str,
        policy: &Self::Prepared,
        op: Operation,
    ) -> impl Future<Output = Result<Outcome, BackendError>> + Send;
}

/// The typed calls of every [`Backend`], each one [`Backend::apply`] of its
/// [`Operation`]: `backend.check("user-1", &prepared, 1).await?`.
pub trait BackendExt: Backend {
    /// Decides a request of `cost` for `key` against every limit of the
    /// policy, atomically, and charges it if admitted. Cost 0 is a peek.
    fn check(
        &self,
        key: &str,
        policy: &Self::Prepared,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send {
        Reported::new(
            self.apply(key, policy, Operation::Check(cost)),
            Outcome::into_decision,
        )
    }

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
        policy: &Self::Prepared,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send {
        Reported::new(
            self.apply(key, policy, Operation::Refund(cost)),
            Outcome::into_decision,
        )
    }

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
        policy: &Self::Prepared,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send {
        Reported::new(
            self.apply(key, policy, Operation::Force(cost)),
            Outcome::into_decision,
        )
    }

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
        policy: &Self::Prepared,
        max: u64,
    ) -> impl Future<Output = Result<Lease, BackendError>> + Send {
        Reported::new(
            self.apply(key, policy, Operation::Lease(max)),
            Outcome::into_lease,
        )
    }

    /// Forgets `key`'s state under the policy, as if it had never been seen.
    fn reset(
        &self,
        key: &str,
        policy: &Self::Prepared,
    ) -> impl Future<Output = Result<(), BackendError>> + Send {
        Reported::new(
            self.apply(key, policy, Operation::Reset),
            Outcome::into_reset,
        )
    }
}

impl<B: Backend> BackendExt for B {}

pin_project! {
    /// What a typed call reports: its [`Backend::apply`] future, polled
    /// where it lies, and the outcome read as the call's answer. Not an
    /// `async` fn or block: one keeps the store's future twice (the value
    /// it was given and the one it awaits) and copies it from one to the
    /// other at the first poll. The server's guarded store's call is a
    /// state machine of several hundred bytes, and every caller above
    /// carries and moves what is held here.
    struct Reported<F, R> {
        #[pin]
        applied: F,
        report: R,
    }
}

impl<F, R> Reported<F, R> {
    fn new(applied: F, report: R) -> Self {
        Reported { applied, report }
    }
}

impl<F, R, T> Future for Reported<F, R>
where
    F: Future<Output = Result<Outcome, BackendError>>,
    R: Fn(Outcome) -> Result<T, BackendError>,
{
    type Output = Result<T, BackendError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        this.applied
            .poll(cx)
            .map(|applied| applied.and_then(&*this.report))
    }
}

/// One of the [`Backend`] operations on a key, with its amount: the one
/// vocabulary every store and wrapper passes along (shared stores send it
/// to one server-side entry point).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// [`BackendExt::check`] of this cost (0 peeks); answers
    /// [`Outcome::Decided`].
    Check(u64),
    /// [`BackendExt::refund`] of this cost; answers [`Outcome::Decided`].
    Refund(u64),
    /// [`BackendExt::force`] of this cost; answers [`Outcome::Decided`].
    Force(u64),
    /// [`BackendExt::lease`] of at most this cost; answers
    /// [`Outcome::Leased`].
    Lease(u64),
    /// [`BackendExt::reset`]; answers [`Outcome::Reset`].
    Reset,
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

    /// The outcome of this operation from what a charging store call
    /// reports, the cost it charged with the key's numbers (a [`Lease`]):
    /// the lease itself for a lease, its decision otherwise.
    pub fn outcome(self, charged: Lease) -> Outcome {
        match self {
            Operation::Lease(_) => Outcome::Leased(charged),
            _ => Outcome::Decided(charged.decision),
        }
    }
}

/// What [`Backend::apply`] did, by the kind of its [`Operation`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A check, refund or forced charge: the key's numbers after it.
    Decided(Decision),
    /// A lease: the units granted and the key's numbers.
    Leased(Lease),
    /// A reset: the key is forgotten.
    Reset,
}

impl Outcome {
    /// The decision of a check, refund or forced charge; a backend that
    /// answered another kind is reported as a store error.
    pub fn into_decision(self) -> Result<Decision, BackendError> {
        match self {
            Outcome::Decided(decision) => Ok(decision),
            other => Err(other.mismatch("a decision")),
        }
    }

    /// The lease of a lease.
    pub fn into_lease(self) -> Result<Lease, BackendError> {
        match self {
            Outcome::Leased(lease) => Ok(lease),
            other => Err(other.mismatch("a lease")),
        }
    }

    /// The end of a reset.
    pub fn into_reset(self) -> Result<(), BackendError> {
        match self {
            Outcome::Reset => Ok(()),
            other => Err(other.mismatch("a reset")),
        }
    }

    fn mismatch(self, expected: &str) -> BackendError {
        BackendError::Store(format!("the backend answered {self:?} for {expected}"))
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
    type Prepared = <P::Target as Backend>::Prepared;

    fn decides_at_once(&self) -> bool {
        (**self).decides_at_once()
    }

    fn prepare(&self, policy: &Policy) -> Result<Self::Prepared, BackendError> {
        (**self).prepare(policy)
    }

    fn apply(
        &self,
        key: &str,
        policy: &Self::Prepared,
        op: Operation,
    ) -> impl Future<Output = Result<Outcome, BackendError>> + Send {
        (**self).apply(key, policy, op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decision admitting the last unit of a quota of one.
    fn admitted() -> Decision {
        Decision {
            allowed: true,
            limit: 1,
            remaining: 0,
            retry_after: tollgate_core::RetryAfter::Now,
            reset_after: 0,
            delay: 0,
        }
    }

    #[test]
    fn an_outcome_of_another_kind_is_a_store_error_not_a_panic() {
        let decision = admitted();
        let leased = Operation::Lease(1).outcome(Lease {
            granted: 1,
            decision,
        });
        assert_eq!(leased.into_lease().unwrap().granted, 1);
        assert!(matches!(
            leased.into_decision(),
            Err(BackendError::Store(_))
        ));
        assert_eq!(
            Operation::Check(1).outcome(Lease {
                granted: 1,
                decision
            }),
            Outcome::Decided(decision)
        );
        assert!(matches!(
            Outcome::Reset.into_lease(),
            Err(BackendError::Store(_))
        ));
        assert!(Outcome::Reset.into_reset().is_ok());
    }

    /// A store whose call keeps a kilobyte across its one wait, as a shared
    /// store's client does, and answers `outcome`.
    struct Large {
        outcome: Outcome,
    }

    impl Backend for Large {
        type Prepared = ();

        fn prepare(&self, _: &Policy) -> Result<(), BackendError> {
            Ok(())
        }

        fn apply(
            &self,
            _: &str,
            _: &(),
            _: Operation,
        ) -> impl Future<Output = Result<Outcome, BackendError>> + Send {
            let outcome = self.outcome;
            async move {
                let buffer = ([1u8; 1024], String::from("held"));
                tokio::task::yield_now().await;
                assert_eq!(buffer.0.iter().map(|&b| u64::from(b)).sum::<u64>(), 1024);
                assert_eq!(buffer.1, "held");
                Ok(outcome)
            }
        }
    }

    #[tokio::test]
    async fn a_typed_call_holds_the_store_call_once_and_reads_its_outcome() {
        let decision = admitted();
        let store = Large {
            outcome: Outcome::Decided(decision),
        };
        let applied = std::mem::size_of_val(&store.apply("k", &(), Operation::Check(1)));
        assert!(applied > 1024);
        assert_eq!(std::mem::size_of_val(&store.check("k", &(), 1)), applied);
        assert_eq!(std::mem::size_of_val(&store.reset("k", &())), applied);
        assert_eq!(store.check("k", &(), 1).await.unwrap(), decision);
        assert_eq!(store.refund("k", &(), 1).await.unwrap(), decision);
        assert_eq!(store.force("k", &(), 1).await.unwrap(), decision);
        assert!(matches!(
            store.lease("k", &(), 1).await,
            Err(BackendError::Store(_))
        ));
        assert!(matches!(
            store.reset("k", &()).await,
            Err(BackendError::Store(_))
        ));
    }
}
