//! The store behind the engine, chosen by URL: `memory` (the default,
//! nothing to install), `redis://`, `rediss://`, `redis+cluster://`,
//! `postgres://`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use tollgate::{
    Backend, BackendError, Batch, BatchStats, Batched, BreakerState, Decision, FailurePolicy,
    Guarded, KeyStr, MemoryBackend, MonotonicClock, OnStoreError, Operation, Outcome, Policy,
    Resilient, UnixClock,
};
use tollgate_http::{Fallback as HttpFallback, StoreFailure};
use tollgate_postgres::{PostgresBackend, PostgresConfig};
use tollgate_redis::{redact, RedisBackend, RedisConfig, CLUSTER_SCHEME};

use crate::config::StoreSettings;

/// Default deadline of one store call on the request path
/// (`--store-timeout`): the libraries' own, 50 ms. A call past it is a store
/// error, which the limit's `on_store_error` answers. Keep it under the
/// client's own deadline (Envoy's rate limit filter gives up after 20 ms by
/// default, then applies its `failure_mode_deny`) when the file's
/// `on_store_error` should decide rather than the client.
pub const DEFAULT_STORE_TIMEOUT: Duration = tollgate_redis::DEFAULT_TIMEOUT;

/// The memory store's bounds, as given by the flags (`--memory-max-keys`,
/// `--memory-sweep-every`) or the file's `memory` section: each `None`
/// leaves the choice to the next source, then to [`MemoryBounds::default`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemorySettings {
    /// See [`MemoryBounds::max_keys`].
    pub max_keys: Option<usize>,
    /// See [`MemoryBounds::sweep_every`].
    pub sweep_every: Option<Duration>,
}

impl MemorySettings {
    /// These settings, with `fallback`'s where these have none.
    pub fn or(self, fallback: MemorySettings) -> MemorySettings {
        MemorySettings {
            max_keys: self.max_keys.or(fallback.max_keys),
            sweep_every: self.sweep_every.or(fallback.sweep_every),
        }
    }

    /// The bounds, defaults filled in.
    pub fn bounds(self) -> MemoryBounds {
        let default = MemoryBounds::default();
        MemoryBounds {
            max_keys: self.max_keys.unwrap_or(default.max_keys),
            sweep_every: self.sweep_every.unwrap_or(default.sweep_every),
        }
    }
}

/// The memory store's bounds in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryBounds {
    /// Keys held at most per policy (each distinct limit is one policy); a
    /// new key beyond it evicts an idle one, or, if none is idle, shares one
    /// budget with the other keys left out (never unlimited).
    pub max_keys: usize,
    /// How often idle keys are forgotten, giving their memory back.
    pub sweep_every: Duration,
}

impl Default for MemoryBounds {
    fn default() -> Self {
        MemoryBounds {
            // About 160 MB per limit for keys of 100 bytes (docs/SERVER.md).
            max_keys: 1_000_000,
            sweep_every: Duration::from_secs(10),
        }
    }
}

/// One of the stores, picked at start.
pub enum AnyBackend {
    /// In this process: fast, not shared between instances. Its clock
    /// counts from the Unix epoch, so fixed windows start on their unit's
    /// boundaries as in the shared stores.
    Memory(MemoryBackend<UnixClock>),
    /// Redis or Redis Cluster, shared by every instance.
    Redis(RedisBackend),
    /// PostgreSQL, shared by every instance.
    Postgres(PostgresBackend),
}

/// Why no store could be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL names no known store.
    #[error("unsupported store `{0}`: expected memory, redis://HOST:PORT, rediss://HOST:PORT, {CLUSTER_SCHEME}HOST:PORT[,HOST:PORT...] or postgres://USER@HOST[:PORT]/DB")]
    Unsupported(String),
    /// The store did not answer.
    #[error("cannot use the store: {0}")]
    Connect(BackendError),
}

/// The kinds of store, told apart by their URL's scheme.
enum Kind {
    Memory,
    Redis,
    Postgres,
}

fn kind(url: &str) -> Result<Kind, StoreError> {
    if url == "memory" || url == "memory://" {
        return Ok(Kind::Memory);
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Kind::Postgres);
    }
    let redis = ["redis://", "rediss://", "unix://", CLUSTER_SCHEME];
    if redis.iter().any(|scheme| url.starts_with(scheme)) {
        return Ok(Kind::Redis);
    }
    Err(StoreError::Unsupported(redact(url)))
}

/// Whether the store `url` names could enforce `policy`, without
/// connecting to it: what [`Backend::prepare`] of the connected store
/// answers, for `tollgate serve --check`.
pub fn validate_offline(url: &str, policy: &Policy) -> Result<(), String> {
    let checked = match kind(url).map_err(|e| e.to_string())? {
        // Takes every policy.
        Kind::Memory => Ok(()),
        Kind::Redis => RedisBackend::validate(policy),
        // Exact for every quota (`numeric` arithmetic).
        Kind::Postgres => Ok(()),
    };
    checked.map_err(|e| e.to_string())
}

/// Connects the store `url` names; keys go under `prefix` in shared stores,
/// each call on the request path gives up after `timeout`, and the memory
/// store keeps within `memory`.
pub async fn connect(
    url: &str,
    prefix: &str,
    timeout: Duration,
    memory: MemoryBounds,
) -> Result<AnyBackend, StoreError> {
    match kind(url)? {
        Kind::Memory => Ok(AnyBackend::Memory(
            MemoryBackend::with_clock(UnixClock::new()).max_keys(memory.max_keys),
        )),
        Kind::Postgres => {
            let backend = PostgresConfig::new(url)
                .prefix(prefix)
                .timeout(timeout)
                .connect()
                .await
                .map_err(StoreError::Connect)?;
            Ok(AnyBackend::Postgres(backend))
        }
        Kind::Redis => {
            let backend = RedisConfig::new(url)
                .prefix(prefix)
                .timeout(timeout)
                .connect()
                .await
                .map_err(StoreError::Connect)?;
            Ok(AnyBackend::Redis(backend))
        }
    }
}

/// Forgets the memory store's idle keys every `every` until `stopping`
/// turns true; nothing to do for the shared stores, whose keys expire.
pub async fn sweep_idle(
    backend: Arc<GuardedStore>,
    every: Duration,
    mut stopping: watch::Receiver<bool>,
) {
    let Some(memory) = backend.memory() else {
        return;
    };
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = crate::listener::stopped(&mut stopping) => return,
            _ = ticks.tick() => {
                let removed = memory.sweep();
                tracing::debug!(removed, held = memory.len(), "idle keys swept");
            }
        }
    }
}

/// The store as the server calls it: a circuit breaker and a deadline on
/// every call (the library's `Resilient`) over, when the file's `store`
/// section asks for it, leases of hot keys' units in batches (`Batched`),
/// over the store itself.
///
/// A store failure (a deadline missed, the store down, the breaker open)
/// comes back as the error: the limit's `on_store_error` decides, in the
/// engine or the HTTP layer, and [`GuardedStore::fallback`] answers
/// `fallback`.
pub struct GuardedStore {
    guarded: Resilient<Layers>,
    instances: u32,
    /// The lease TTL, when batched.
    sweep: Option<Duration>,
}

/// The store, batched or not.
enum Layers {
    Direct(AnyBackend),
    Batched(Box<Batched<AnyBackend>>),
}

impl GuardedStore {
    /// Guards `backend` as `settings` say; `name` labels the breaker in
    /// logs and metrics, and each call gives up after `timeout`.
    pub fn new(
        backend: AnyBackend,
        name: &str,
        timeout: Duration,
        settings: &StoreSettings,
    ) -> Self {
        let layers = match settings.batch {
            Some(batch) => Layers::Batched(Box::new(Batched::new(backend, batch))),
            None => Layers::Direct(backend),
        };
        let guarded = Resilient::builder(layers)
            .name(name)
            .breaker(settings.breaker)
            .default_policy(FailurePolicy::new(OnStoreError::Closed).deadline(timeout))
            .build();
        GuardedStore {
            guarded,
            instances: settings.instances,
            sweep: settings.batch.map(|b| b.ttl()),
        }
    }

    /// Gives leases older than their TTL back every TTL until `stopping`;
    /// returns at once without batching.
    pub async fn sweep(&self, mut stopping: tokio::sync::watch::Receiver<bool>) {
        let Some(every) = self.sweep else { return };
        let mut ticks = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = ticks.tick() => self.refund_expired().await,
                changed = stopping.changed() => {
                    if changed.is_err() || *stopping.borrow() {
                        break;
                    }
                }
            }
        }
    }

    /// The in-process decision of `on_store_error: fallback`: `key` charged
    /// `cost` in this instance's share of `policy` (each limit divided by
    /// the instances sharing the store). Kept across reloads, per policy.
    pub fn fallback(&self, key: &str, policy: &Policy, cost: u64) -> Decision {
        self.guarded
            .fallback_limiter(policy, self.instances)
            .check_cost(KeyStr::new(key), cost)
    }

    /// The memory store under the guards, when that is the store.
    pub fn memory(&self) -> Option<&MemoryBackend<UnixClock>> {
        let store = match self.guarded.backend() {
            Layers::Direct(b) => b,
            Layers::Batched(b) => b.backend(),
        };
        match store {
            AnyBackend::Memory(memory) => Some(memory),
            _ => None,
        }
    }

    /// Where the store's breaker is.
    pub fn breaker_state(&self) -> BreakerState {
        self.guarded.breaker().state()
    }

    /// What the batching did so far, when the store is batched.
    pub fn batch_stats(&self) -> Option<BatchStats> {
        match self.guarded.backend() {
            Layers::Batched(b) => Some(b.stats()),
            Layers::Direct(_) => None,
        }
    }

    /// Gives back the unspent units of leases older than their TTL;
    /// nothing without batching.
    async fn refund_expired(&self) {
        if let Layers::Batched(b) = self.guarded.backend() {
            b.refund_expired().await;
        }
    }

    /// Gives back every unspent leased unit, for a server that stopped
    /// deciding; nothing without batching.
    pub async fn give_back_leases(&self) {
        if let Layers::Batched(b) = self.guarded.backend() {
            b.shutdown().await;
        }
    }
}

/// How the store is doing, for `/v1/top`'s `store`.
pub trait StoreHealth: Send + Sync {
    /// Where the store's breaker is.
    fn breaker_state(&self) -> BreakerState;
}

impl StoreHealth for GuardedStore {
    fn breaker_state(&self) -> BreakerState {
        GuardedStore::breaker_state(self)
    }
}

/// Decides without the store: what `on_store_error: fallback` answers.
pub trait Fallback: Send + Sync {
    /// `key` charged `cost` under `policy`, in process.
    fn decide(&self, key: &str, policy: &Policy, cost: u64) -> Decision;
}

impl Fallback for GuardedStore {
    fn decide(&self, key: &str, policy: &Policy, cost: u64) -> Decision {
        self.fallback(key, policy, cost)
    }
}

/// An HTTP rule's `on_store_error: fallback`, for the HTTP layer.
pub struct RuleFallback {
    /// Where the rule's requests are decided when the store fails.
    pub fallback: Arc<dyn Fallback>,
    /// The rule's policy.
    pub policy: Policy,
}

impl StoreFailure for RuleFallback {
    fn on_failure(&self, _rule: &str, key: &str, cost: u64, _error: &BackendError) -> HttpFallback {
        HttpFallback::Decided(self.fallback.decide(key, &self.policy, cost))
    }
}

/// The breaker's name for the store at `url`: its kind, never its address
/// (which may hold a password).
pub fn store_name(url: &str) -> &'static str {
    if url.starts_with("postgres") {
        "postgres"
    } else if url.starts_with("memory") {
        "memory"
    } else {
        "redis"
    }
}

impl Backend for GuardedStore {
    type Prepared = Guarded<Batch<AnyPrepared>, MonotonicClock>;

    fn decides_at_once(&self) -> bool {
        self.guarded.decides_at_once()
    }

    fn prepare(&self, policy: &Policy) -> Result<Self::Prepared, BackendError> {
        self.guarded.prepare(policy)
    }

    /// Through the breaker and the deadline; a store failure comes back as
    /// the error for the limit's `on_store_error` to answer.
    fn apply(
        &self,
        key: &str,
        policy: &Self::Prepared,
        op: Operation,
    ) -> impl Future<Output = Result<Outcome, BackendError>> + Send {
        self.guarded.apply_guarded(key, policy, op)
    }
}

impl Backend for Layers {
    type Prepared = Batch<<AnyBackend as Backend>::Prepared>;

    /// A batched call may wait for another's lease in flight: never at once.
    fn decides_at_once(&self) -> bool {
        match self {
            Layers::Direct(b) => b.decides_at_once(),
            Layers::Batched(_) => false,
        }
    }

    fn prepare(&self, policy: &Policy) -> Result<Self::Prepared, BackendError> {
        match self {
            Layers::Direct(b) => b.prepare(policy).map(Batch::unbatched),
            // Batched refuses sliding logs, but decides them in the store
            // unbatched: the server batches what it can and accepts the rest.
            Layers::Batched(b) => b
                .prepare(policy)
                .or_else(|_| b.backend().prepare(policy).map(Batch::unbatched)),
        }
    }

    async fn apply(
        &self,
        key: &str,
        policy: &Self::Prepared,
        op: Operation,
    ) -> Result<Outcome, BackendError> {
        match self {
            Layers::Direct(b) => b.apply(key, policy.inner(), op).await,
            Layers::Batched(b) => b.apply(key, policy, op).await,
        }
    }
}

/// A policy prepared by the store of an [`AnyBackend`].
#[derive(Clone)]
pub enum AnyPrepared {
    /// By the memory store.
    Memory(<MemoryBackend<UnixClock> as Backend>::Prepared),
    /// By Redis.
    Redis(<RedisBackend as Backend>::Prepared),
    /// By PostgreSQL.
    Postgres(<PostgresBackend as Backend>::Prepared),
}

impl Backend for AnyBackend {
    type Prepared = AnyPrepared;

    fn decides_at_once(&self) -> bool {
        match self {
            AnyBackend::Memory(b) => b.decides_at_once(),
            AnyBackend::Redis(_) | AnyBackend::Postgres(_) => false,
        }
    }

    fn prepare(&self, policy: &Policy) -> Result<Self::Prepared, BackendError> {
        Ok(match self {
            AnyBackend::Memory(b) => AnyPrepared::Memory(b.prepare(policy)?),
            AnyBackend::Redis(b) => AnyPrepared::Redis(b.prepare(policy)?),
            AnyBackend::Postgres(b) => AnyPrepared::Postgres(b.prepare(policy)?),
        })
    }

    async fn apply(
        &self,
        key: &str,
        policy: &Self::Prepared,
        op: Operation,
    ) -> Result<Outcome, BackendError> {
        // A shared store's call is a state machine of kilobytes (its client's
        // futures) and a memory decision one of bytes: held inline, every
        // memory decision would carry, move and box the largest (20 kB, a
        // `memcpy` bigger than the decision, measured in docs/PERFORMANCE.md,
        // "Server"). Boxed, the shared stores pay one allocation next to a
        // network round trip.
        match (self, policy) {
            (AnyBackend::Memory(b), AnyPrepared::Memory(p)) => b.apply(key, p, op).await,
            (AnyBackend::Redis(b), AnyPrepared::Redis(p)) => Box::pin(b.apply(key, p, op)).await,
            (AnyBackend::Postgres(b), AnyPrepared::Postgres(p)) => {
                Box::pin(b.apply(key, p, op)).await
            }
            _ => Err(BackendError::Config(
                "a policy prepared by another store".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layer and the engine decide on their own stack, with no deadline
    /// timer, for the memory store alone.
    #[tokio::test]
    async fn only_the_memory_store_unbatched_decides_at_once() {
        let guarded = |settings: StoreSettings| async move {
            let memory = connect(
                "memory",
                "p",
                DEFAULT_STORE_TIMEOUT,
                MemoryBounds::default(),
            )
            .await
            .unwrap();
            GuardedStore::new(memory, "memory", DEFAULT_STORE_TIMEOUT, &settings)
        };
        assert!(guarded(StoreSettings::default()).await.decides_at_once());
        let batched = StoreSettings {
            batch: Some(tollgate::BatchConfig::default()),
            ..StoreSettings::default()
        };
        assert!(!guarded(batched).await.decides_at_once());
    }

    #[tokio::test]
    async fn unknown_schemes_are_clear_errors_without_passwords() {
        let e = connect(
            "mysql://u:pw@h",
            "p",
            DEFAULT_STORE_TIMEOUT,
            MemoryBounds::default(),
        )
        .await
        .err()
        .unwrap();
        assert!(
            e.to_string()
                .starts_with("unsupported store `mysql://***@h`"),
            "{e}"
        );
        assert!(matches!(
            connect(
                "memory",
                "p",
                DEFAULT_STORE_TIMEOUT,
                MemoryBounds::default()
            )
            .await,
            Ok(AnyBackend::Memory(_))
        ));
    }
}
