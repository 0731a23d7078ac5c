//! The store behind the engine, chosen by URL: `memory` (the default,
//! nothing to install), `redis://`, `rediss://`, `redis+cluster://`,
//! `postgres://`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use tollgate::{Backend, BackendError, Decision, Lease, MemoryBackend, Policy, UnixClock};
use tollgate_postgres::{PostgresBackend, PostgresConfig};
use tollgate_redis::{redact, RedisBackend, RedisConfig, CLUSTER_SCHEME};

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
/// connecting to it: what [`Backend::validate`] of the connected store
/// answers, for `tollgate serve --check`.
pub fn validate_offline(url: &str, policy: &Policy) -> Result<(), String> {
    let checked = match kind(url).map_err(|e| e.to_string())? {
        Kind::Memory => MemoryBackend::new().validate(policy),
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
    backend: Arc<AnyBackend>,
    every: Duration,
    mut stopping: watch::Receiver<bool>,
) {
    let AnyBackend::Memory(memory) = &*backend else {
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

impl Backend for AnyBackend {
    fn validate(&self, policy: &Policy) -> Result<(), BackendError> {
        match self {
            AnyBackend::Memory(b) => b.validate(policy),
            AnyBackend::Redis(b) => Backend::validate(b, policy),
            AnyBackend::Postgres(b) => Backend::validate(b, policy),
        }
    }

    async fn check(&self, key: &str, policy: &Policy, cost: u64) -> Result<Decision, BackendError> {
        match self {
            AnyBackend::Memory(b) => b.check(key, policy, cost).await,
            AnyBackend::Redis(b) => b.check(key, policy, cost).await,
            AnyBackend::Postgres(b) => b.check(key, policy, cost).await,
        }
    }

    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), BackendError> {
        match self {
            AnyBackend::Memory(b) => b.reset(key, policy).await,
            AnyBackend::Redis(b) => b.reset(key, policy).await,
            AnyBackend::Postgres(b) => b.reset(key, policy).await,
        }
    }

    async fn refund(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> Result<Decision, BackendError> {
        match self {
            AnyBackend::Memory(b) => b.refund(key, policy, cost).await,
            AnyBackend::Redis(b) => b.refund(key, policy, cost).await,
            AnyBackend::Postgres(b) => b.refund(key, policy, cost).await,
        }
    }

    async fn force(&self, key: &str, policy: &Policy, cost: u64) -> Result<Decision, BackendError> {
        match self {
            AnyBackend::Memory(b) => b.force(key, policy, cost).await,
            AnyBackend::Redis(b) => b.force(key, policy, cost).await,
            AnyBackend::Postgres(b) => b.force(key, policy, cost).await,
        }
    }

    async fn lease(&self, key: &str, policy: &Policy, max: u64) -> Result<Lease, BackendError> {
        match self {
            AnyBackend::Memory(b) => b.lease(key, policy, max).await,
            AnyBackend::Redis(b) => b.lease(key, policy, max).await,
            AnyBackend::Postgres(b) => b.lease(key, policy, max).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
