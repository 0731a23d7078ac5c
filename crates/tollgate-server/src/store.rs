//! The store behind the engine, chosen by URL: `memory` (the default,
//! nothing to install), `redis://`, `rediss://`, `redis+cluster://`.
//!
//! A new store (PostgreSQL) is one more [`AnyBackend`] variant and one more
//! arm in [`connect`].

use std::time::Duration;

use tollgate::{Backend, BackendError, Decision, Lease, MemoryBackend, Policy};
use tollgate_redis::{RedisBackend, RedisConfig, CLUSTER_SCHEME};

/// Deadline of one store call on the request path.
const STORE_TIMEOUT: Duration = Duration::from_millis(250);

/// One of the stores, picked at start.
pub enum AnyBackend {
    /// In this process: fast, not shared between instances.
    Memory(MemoryBackend),
    /// Redis or Redis Cluster, shared by every instance.
    Redis(RedisBackend),
}

/// Why no store could be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL names no known store.
    #[error("unsupported store `{0}`: expected memory, redis://HOST:PORT, rediss://HOST:PORT or {CLUSTER_SCHEME}HOST:PORT[,HOST:PORT...]")]
    Unsupported(String),
    /// The PostgreSQL backend is not part of this build yet.
    #[error("the PostgreSQL store is not available in this build")]
    PostgresNotBuilt,
    /// The store did not answer.
    #[error("cannot use the store: {0}")]
    Connect(BackendError),
}

/// Connects the store `url` names; keys go under `prefix` in shared stores.
pub async fn connect(url: &str, prefix: &str) -> Result<AnyBackend, StoreError> {
    if url == "memory" || url == "memory://" {
        return Ok(AnyBackend::Memory(MemoryBackend::new()));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Err(StoreError::PostgresNotBuilt);
    }
    let redis = ["redis://", "rediss://", "unix://", CLUSTER_SCHEME];
    if !redis.iter().any(|scheme| url.starts_with(scheme)) {
        return Err(StoreError::Unsupported(redacted(url)));
    }
    let backend = RedisConfig::new(url)
        .prefix(prefix)
        .timeout(STORE_TIMEOUT)
        .connect()
        .await
        .map_err(StoreError::Connect)?;
    Ok(AnyBackend::Redis(backend))
}

/// The URL without its password, for messages.
pub fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

impl Backend for AnyBackend {
    fn validate(&self, policy: &Policy) -> Result<(), BackendError> {
        match self {
            AnyBackend::Memory(b) => b.validate(policy),
            AnyBackend::Redis(b) => Backend::validate(b, policy),
        }
    }

    async fn check(&self, key: &str, policy: &Policy, cost: u64) -> Result<Decision, BackendError> {
        match self {
            AnyBackend::Memory(b) => b.check(key, policy, cost).await,
            AnyBackend::Redis(b) => b.check(key, policy, cost).await,
        }
    }

    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), BackendError> {
        match self {
            AnyBackend::Memory(b) => b.reset(key, policy).await,
            AnyBackend::Redis(b) => b.reset(key, policy).await,
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
        }
    }

    async fn force(&self, key: &str, policy: &Policy, cost: u64) -> Result<Decision, BackendError> {
        match self {
            AnyBackend::Memory(b) => b.force(key, policy, cost).await,
            AnyBackend::Redis(b) => b.force(key, policy, cost).await,
        }
    }

    async fn lease(&self, key: &str, policy: &Policy, max: u64) -> Result<Lease, BackendError> {
        match self {
            AnyBackend::Memory(b) => b.lease(key, policy, max).await,
            AnyBackend::Redis(b) => b.lease(key, policy, max).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show_in_messages() {
        assert_eq!(
            redacted("redis://user:secret@h:6379/0"),
            "redis://***@h:6379/0"
        );
        assert_eq!(redacted("redis://h:6379"), "redis://h:6379");
    }

    #[tokio::test]
    async fn unknown_schemes_and_postgres_are_clear_errors() {
        let e = connect("mysql://u:pw@h", "p").await.err().unwrap();
        assert!(
            e.to_string()
                .starts_with("unsupported store `mysql://***@h`"),
            "{e}"
        );
        assert!(matches!(
            connect("postgres://h/db", "p").await,
            Err(StoreError::PostgresNotBuilt)
        ));
        assert!(matches!(
            connect("memory", "p").await,
            Ok(AnyBackend::Memory(_))
        ));
    }
}
