//! [`Resilient`]: any [`Backend`] with a deadline on every call, a circuit
//! breaker, and a chosen behaviour per policy when the store fails.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use tollgate_core::{Decision, RetryAfter};

use crate::counters::counters;
use crate::{
    Backend, BackendError, Breaker, BreakerConfig, Clock, CompactKey, KeyStr, Limit, Limiter,
    MonotonicClock, Operation, Outcome, Policy, Quota,
};

/// Default deadline of a store call made through [`Resilient`].
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(50);

/// What a decision does when the store cannot make it (a failure, a
/// deadline missed, or the breaker open).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OnStoreError {
    /// Admit the request (counted in [`ResilienceStats::failed_open`]).
    Open,
    /// Refuse: the call returns the [`BackendError`], which an HTTP layer
    /// answers with 503.
    Closed,
    /// Decide in process with this instance's share of the quota (see the
    /// [`Resilient`] docs on the fleet); `instances` is the
    /// number of instances sharing the store (0 counts as 1).
    Fallback {
        /// Instances sharing the store's quota.
        instances: u32,
    },
}

/// How calls for one policy are made: their deadline and what happens when
/// the store fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FailurePolicy {
    /// Deadline of each store call, connection set-up included.
    pub deadline: Duration,
    /// What a decision does when the store fails.
    pub on_error: OnStoreError,
}

impl FailurePolicy {
    /// `on_error` with the default deadline ([`DEFAULT_DEADLINE`]).
    pub const fn new(on_error: OnStoreError) -> Self {
        FailurePolicy {
            deadline: DEFAULT_DEADLINE,
            on_error,
        }
    }

    /// The same with another deadline.
    pub const fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }
}

impl Default for FailurePolicy {
    /// Fail closed within 50 ms: nothing is admitted that the store did not
    /// decide unless configured.
    fn default() -> Self {
        FailurePolicy::new(OnStoreError::Closed)
    }
}

counters! {
    /// Counts of what a [`Resilient`] did since it was built.
    pub struct ResilienceStats, kept in Counters {
        /// Calls that reached the store.
        store_calls,
        /// Of those, the ones that failed (or missed their deadline).
        store_failures,
        /// Calls refused by the open breaker without reaching the store.
        short_circuited,
        /// Decisions admitted because the store failed ([`OnStoreError::Open`]).
        failed_open,
        /// Decisions refused because the store failed ([`OnStoreError::Closed`]).
        failed_closed,
        /// Decisions made by the in-process fallback.
        fallback,
    }
}

/// A [`Backend`] with a deadline, a circuit breaker and a per-policy
/// [`OnStoreError`]; build it with
/// [`Resilient::builder`].
///
/// It is itself a [`Backend`], so it drops in wherever a store goes (a
/// [`Store`](crate::Store), the HTTP layer, the server):
///
/// ```
/// # async fn demo() -> Result<(), tollgate::BackendError> {
/// use std::time::Duration;
/// use tollgate::{
///     Algorithm, FailurePolicy, Limit, MemoryBackend, OnStoreError, Quota, Resilient, Store,
/// };
///
/// let login = Limit::new(Algorithm::SlidingLog, Quota::per_minute(5).unwrap());
/// let api = Limit::new(Algorithm::Gcra, Quota::per_second(100).unwrap());
/// let backend = Resilient::builder(MemoryBackend::new()) // RedisBackend in production
///     .name("redis-main")
///     // By default: admit when the store fails, within 50 ms.
///     .default_policy(FailurePolicy::new(OnStoreError::Open))
///     // Logins: refuse (503) rather than let an attacker through.
///     .policy(login, FailurePolicy::new(OnStoreError::Closed).deadline(Duration::from_millis(20)))
///     // The API: this instance's share of the limit, in process.
///     .policy(api, FailurePolicy::new(OnStoreError::Fallback { instances: 4 }))
///     .build();
/// let store = Store::new(api, backend)?;
/// assert!(store.check("user-1").await?.allowed);
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(demo()).unwrap();
/// ```
///
/// # What counts as a store failure
///
/// A [`BackendError::Timeout`] (including the layer's own deadline),
/// [`BackendError::Unavailable`] or [`BackendError::Store`]: these feed the
/// breaker and trigger the policy's [`OnStoreError`]. Errors about the
/// request itself (an invalid key, an unsupported policy, out of range) or
/// the client's configuration (bad credentials, a bad URL) are not the
/// store failing: they pass through unchanged, so a misconfigured fleet
/// does not quietly fail open.
///
/// # For an HTTP layer
///
/// Wrap the backend once, with each route's policy given its
/// [`FailurePolicy`]; an admitted or refused [`Decision`] is answered as
/// usual (fallback decisions included), and an `Err(e)` with
/// [`BackendError::is_store_failure`] is the fail-closed case (503).
///
/// # Fallback and the fleet
///
/// In [`OnStoreError::Fallback`] each instance decides alone, in a
/// [`Limiter`] whose quota is the policy's divided by `instances` (limit and
/// burst each floored, at least 1). While the store is down, the fleet as a
/// whole admits at most `instances * max(1, limit / instances)` per window,
/// which is at most the limit when `instances <= limit` (and `instances`
/// per window otherwise). Load spread unevenly across instances is held to
/// less than the limit, since an idle instance's share goes unused.
///
/// When the store answers again, decisions go back to it at once; what was
/// spent in the fallback is not copied to the store. So in the window when
/// the store returns, a key may be admitted up to its limit again by the
/// store on top of what the fallbacks admitted: at most twice the limit
/// over that one window. The fallback's own state is kept (and expires as
/// usual), so a second outage in the same window continues from it.
pub struct Resilient<B, C = MonotonicClock> {
    backend: B,
    breaker: Breaker<C>,
    default: FailurePolicy,
    policies: HashMap<Policy, FailurePolicy>,
    fallbacks: RwLock<HashMap<Policy, Arc<Limiter<CompactKey, C>>>>,
    counters: Counters,
}

/// Options of a [`Resilient`], from [`Resilient::builder`].
pub struct ResilientBuilder<B, C> {
    backend: B,
    name: String,
    clock: C,
    breaker: BreakerConfig,
    default: FailurePolicy,
    policies: HashMap<Policy, FailurePolicy>,
}

impl<B: Backend> Resilient<B> {
    /// Options for wrapping `backend`: fail closed within 50 ms, the
    /// default [`BreakerConfig`], the monotonic clock.
    pub fn builder(backend: B) -> ResilientBuilder<B, MonotonicClock> {
        ResilientBuilder {
            backend,
            name: "store".into(),
            clock: MonotonicClock::new(),
            breaker: BreakerConfig::default(),
            default: FailurePolicy::default(),
            policies: HashMap::new(),
        }
    }
}

impl<B: Backend, C: Clock + Clone> ResilientBuilder<B, C> {
    /// The store's name in logs and metrics (default `store`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The clock of the breaker and the fallback limiters (a
    /// [`FakeClock`](crate::FakeClock) in tests). Deadlines run on tokio's
    /// timer.
    pub fn clock<C2: Clock + Clone>(self, clock: C2) -> ResilientBuilder<B, C2> {
        ResilientBuilder {
            backend: self.backend,
            name: self.name,
            clock,
            breaker: self.breaker,
            default: self.default,
            policies: self.policies,
        }
    }

    /// When the breaker opens and how it recovers.
    pub fn breaker(mut self, config: BreakerConfig) -> Self {
        self.breaker = config;
        self
    }

    /// The failure policy of every policy not given its own.
    pub fn default_policy(mut self, failure: FailurePolicy) -> Self {
        self.default = failure;
        self
    }

    /// The failure policy of `policy` (a [`Limit`] or several).
    pub fn policy(mut self, policy: impl Into<Policy>, failure: FailurePolicy) -> Self {
        self.policies.insert(policy.into(), failure);
        self
    }

    /// The layer.
    pub fn build(self) -> Resilient<B, C> {
        Resilient {
            backend: self.backend,
            breaker: Breaker::new(self.name, self.breaker, self.clock),
            default: self.default,
            policies: self.policies,
            fallbacks: RwLock::new(HashMap::new()),
            counters: Counters::default(),
        }
    }
}

/// How the error of a call refused by the open breaker begins.
const SHORT_CIRCUIT: &str = "circuit open for store";

impl BackendError {
    /// Whether the call was refused by an open circuit breaker without
    /// reaching the store. The breaker logs once when it opens; a caller
    /// logging each failed decision can leave these out (or log them at a
    /// lower level), which an open breaker answers by the thousand.
    pub fn is_short_circuit(&self) -> bool {
        matches!(self, BackendError::Unavailable(m) if m.starts_with(SHORT_CIRCUIT))
    }

    /// Whether the store failed ([`BackendError::Timeout`],
    /// [`BackendError::Unavailable`], [`BackendError::Store`]), as opposed to
    /// the request being one the store refuses: the errors a [`Resilient`]
    /// counts against the store and answers with its [`OnStoreError`].
    pub fn is_store_failure(&self) -> bool {
        matches!(
            self,
            BackendError::Timeout(_) | BackendError::Unavailable(_) | BackendError::Store(_)
        )
    }
}

impl<B: Backend, C: Clock + Clone> Resilient<B, C> {
    /// The failure policy `policy` is called with.
    pub fn failure_policy(&self, policy: &Policy) -> FailurePolicy {
        self.policies.get(policy).copied().unwrap_or(self.default)
    }

    /// The store's circuit breaker.
    pub fn breaker(&self) -> &Breaker<C> {
        &self.breaker
    }

    /// The wrapped backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// What the layer did so far.
    pub fn stats(&self) -> ResilienceStats {
        self.counters.snapshot()
    }

    /// The in-process limiter that decides `policy` in
    /// [`OnStoreError::Fallback`] with `instances`.
    pub fn fallback_limiter(&self, policy: &Policy, instances: u32) -> Arc<Limiter<CompactKey, C>> {
        if let Some(limiter) = self.fallbacks.read().get(policy) {
            return Arc::clone(limiter);
        }
        let mut fallbacks = self.fallbacks.write();
        let limiter = fallbacks.entry(policy.clone()).or_insert_with(|| {
            Arc::new(
                Limiter::builder(share(policy, instances))
                    .clock(self.breaker_clock())
                    .build(),
            )
        });
        Arc::clone(limiter)
    }

    /// [`Backend::apply`] through the breaker and within the policy's
    /// deadline, but without its [`OnStoreError`]: a store failure (or the
    /// open breaker) comes back as the error. For a caller whose failure
    /// mode belongs to each call rather than to the policy (a server where
    /// two limits with the same quota fail differently); it falls back with
    /// [`Resilient::fallback_limiter`].
    pub async fn apply_guarded(
        &self,
        key: &str,
        policy: &Guarded<B::Prepared, C>,
        op: Operation,
    ) -> Result<Outcome, BackendError> {
        self.guarded(policy.deadline, || {
            self.backend.apply(key, &policy.inner, op)
        })
        .await
    }

    fn breaker_clock(&self) -> C {
        self.breaker.clock().clone()
    }

    /// Makes the call if the breaker allows, within `deadline`, and tells
    /// the breaker how it went. Takes a closure because a backend may do
    /// its work when called rather than when awaited.
    async fn guarded<T, F: Future<Output = Result<T, BackendError>>>(
        &self,
        deadline: Duration,
        call: impl FnOnce() -> F,
    ) -> Result<T, BackendError> {
        let Some(permit) = self.breaker.try_call() else {
            self.counters
                .short_circuited
                .fetch_add(1, Ordering::Relaxed);
            return Err(BackendError::Unavailable(format!(
                "{SHORT_CIRCUIT} `{}`: not called until it is probed",
                self.breaker.name()
            )));
        };
        self.counters.store_calls.fetch_add(1, Ordering::Relaxed);
        // A store that decides at once cannot miss a deadline: no timer.
        let result = if self.backend.decides_at_once() {
            call().await
        } else {
            tokio::time::timeout(deadline, call())
                .await
                .unwrap_or(Err(BackendError::Timeout(deadline)))
        };
        let failed = result.as_ref().is_err_and(BackendError::is_store_failure);
        if failed {
            self.counters.store_failures.fetch_add(1, Ordering::Relaxed);
        }
        self.breaker.record(permit, !failed);
        result
    }

    /// The decision when the store could not make it.
    fn on_failure(
        &self,
        key: &str,
        on_error: &Failing<C>,
        cost: u64,
        error: BackendError,
    ) -> Result<Decision, BackendError> {
        let mode = match on_error {
            Failing::Open { .. } => "open",
            Failing::Closed => "closed",
            Failing::Fallback(_) => "fallback",
        };
        metrics::counter!(
            "tollgate_store_failure_decisions_total",
            "store" => self.breaker.name().to_owned(),
            "mode" => mode
        )
        .increment(1);
        match on_error {
            Failing::Open { limit } => {
                self.counters.failed_open.fetch_add(1, Ordering::Relaxed);
                Ok(admitted_unknown(*limit, cost))
            }
            Failing::Closed => {
                self.counters.failed_closed.fetch_add(1, Ordering::Relaxed);
                Err(error)
            }
            Failing::Fallback(limiter) => {
                self.counters.fallback.fetch_add(1, Ordering::Relaxed);
                Ok(limiter.check_cost(KeyStr::new(key), cost))
            }
        }
    }
}

/// A policy prepared by a [`Resilient`]: the wrapped store's preparation,
/// with the policy's deadline and what a failed check does worked out once.
pub struct Guarded<P, C> {
    inner: P,
    deadline: Duration,
    on_error: Failing<C>,
}

impl<P: Clone, C> Clone for Guarded<P, C> {
    fn clone(&self) -> Self {
        Guarded {
            inner: self.inner.clone(),
            deadline: self.deadline,
            on_error: self.on_error.clone(),
        }
    }
}

impl<P, C> Guarded<P, C> {
    /// The wrapped store's preparation of the policy.
    pub fn inner(&self) -> &P {
        &self.inner
    }
}

/// [`OnStoreError`] with what it needs at hand.
enum Failing<C> {
    /// Admit, reporting a fresh key's numbers under this smallest capacity.
    Open {
        limit: u64,
    },
    Closed,
    /// Decide in this instance's share of the policy.
    Fallback(Arc<Limiter<CompactKey, C>>),
}

impl<C> Clone for Failing<C> {
    fn clone(&self) -> Self {
        match self {
            Failing::Open { limit } => Failing::Open { limit: *limit },
            Failing::Closed => Failing::Closed,
            Failing::Fallback(limiter) => Failing::Fallback(Arc::clone(limiter)),
        }
    }
}

/// `policy` with each limit's limit and burst divided by `instances`
/// (floored, at least 1).
fn share(policy: &Policy, instances: u32) -> Policy {
    let n = u64::from(instances.max(1));
    let limits = policy
        .limits()
        .iter()
        .map(|l| {
            let q = l.quota;
            let quota = Quota::with_parts(
                (q.limit() / n).max(1),
                q.period_ns(),
                (q.burst() / n).max(1),
            )
            // Smaller limit and burst over the same period stay valid,
            // except a refill time that grows past the range; keep the
            // quota then (only for quotas at the edge of the range).
            .unwrap_or(q);
            Limit::new(l.algorithm, quota)
        })
        .collect();
    Policy::with_limits(limits).unwrap_or_else(|_| policy.clone())
}

/// The decision of a request admitted without the store: the numbers of a
/// key seen for the first time (nothing better is known) under a policy
/// whose smallest capacity is `limit`.
fn admitted_unknown(limit: u64, cost: u64) -> Decision {
    Decision {
        allowed: true,
        limit,
        remaining: limit.saturating_sub(cost),
        retry_after: RetryAfter::Now,
        reset_after: 0,
        delay: 0,
    }
}

impl<B: Backend, C: Clock + Clone + 'static> Backend for Resilient<B, C> {
    type Prepared = Guarded<B::Prepared, C>;

    /// As the store's: an open breaker and a fallback answer at once too.
    fn decides_at_once(&self) -> bool {
        self.backend.decides_at_once()
    }

    fn prepare(&self, policy: &Policy) -> Result<Self::Prepared, BackendError> {
        let inner = self.backend.prepare(policy)?;
        let failure = self.failure_policy(policy);
        let on_error = match failure.on_error {
            OnStoreError::Open => Failing::Open {
                limit: policy
                    .limits()
                    .iter()
                    .map(Limit::capacity)
                    .min()
                    .unwrap_or(0),
            },
            OnStoreError::Closed => Failing::Closed,
            OnStoreError::Fallback { instances } => {
                Failing::Fallback(self.fallback_limiter(policy, instances))
            }
        };
        Ok(Guarded {
            inner,
            deadline: failure.deadline,
            on_error,
        })
    }

    /// Only a check has a decision to make when the store fails; the other
    /// operations report the failure.
    async fn apply(
        &self,
        key: &str,
        policy: &Self::Prepared,
        op: Operation,
    ) -> Result<Outcome, BackendError> {
        match (op, self.apply_guarded(key, policy, op).await) {
            (Operation::Check(cost), Err(e)) if e.is_store_failure() => self
                .on_failure(key, &policy.on_error, cost, e)
                .map(Outcome::Decided),
            (_, other) => other,
        }
    }
}
