//! Decisions through a shared store (`--store URL`): Redis or Redis Cluster
//! through `tollgate-redis`, PostgreSQL through `tollgate-postgres`, with
//! the store's own clock or a trace's times.

use std::io::{BufRead, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use tokio::runtime::Runtime;
use tollgate::{Backend, BackendError, Policy};
use tollgate_cli::trace::{self, Summary};
use tollgate_core::{Decision, Limit};
use tollgate_postgres::{PostgresBackend, PostgresConfig};
use tollgate_redis::{RedisBackend, RedisConfig, CLUSTER_SCHEME};

/// Deadline of each store call from the command line: a one-off command can
/// wait longer than a service on its request path would.
const CLI_TIMEOUT: Duration = Duration::from_secs(2);

const REDIS_SCHEMES: [&str; 4] = ["redis://", "rediss://", "unix://", CLUSTER_SCHEME];
const POSTGRES_SCHEMES: [&str; 2] = ["postgres://", "postgresql://"];

/// A connected shared store.
pub enum Shared {
    /// Redis or Redis Cluster.
    Redis(RedisBackend),
    /// PostgreSQL.
    Postgres(PostgresBackend),
}

impl Shared {
    /// One decision with the store's clock.
    pub async fn check(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> Result<Decision, BackendError> {
        match self {
            Shared::Redis(r) => r.check(key, policy, cost).await,
            Shared::Postgres(p) => p.check(key, policy, cost).await,
        }
    }
}

/// Whether `url` names a PostgreSQL store.
pub fn is_postgres(url: &str) -> bool {
    POSTGRES_SCHEMES.iter().any(|s| url.starts_with(s))
}

/// Refuses, before connecting, a policy the store at `url` cannot enforce
/// exactly (PostgreSQL takes every quota).
pub fn validate(url: &str, policy: &Policy) -> Result<(), BackendError> {
    if is_postgres(url) {
        return Ok(());
    }
    RedisBackend::validate(policy)
}

/// `url` with any password replaced by `***`, for messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.into();
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) if userinfo.contains(':') => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{user}:***@{hosts}")
        }
        _ => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((name, _)) if name.eq_ignore_ascii_case("password") => {
                        format!("{name}=***")
                    }
                    _ => p.to_string(),
                })
                .collect();
            format!("{path}?{}", params.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// A runtime and a connected backend for `url` under `prefix`.
pub fn connect(url: &str, prefix: &str) -> anyhow::Result<(Runtime, Shared)> {
    if !REDIS_SCHEMES
        .iter()
        .chain(&POSTGRES_SCHEMES)
        .any(|scheme| url.starts_with(scheme))
    {
        bail!(
            "unsupported store `{}`: expected redis://HOST:PORT, rediss://HOST:PORT, \
             {CLUSTER_SCHEME}HOST:PORT[,HOST:PORT...] or postgres://USER@HOST[:PORT]/DB",
            redact(url)
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let context = || format!("cannot use the store `{}`", redact(url));
    let backend = if is_postgres(url) {
        let config = PostgresConfig::new(url)
            .prefix(prefix)
            .timeout(CLI_TIMEOUT)
            .connect_timeout(CLI_TIMEOUT)
            .cleanup_every(None);
        Shared::Postgres(runtime.block_on(config.connect()).with_context(context)?)
    } else {
        let config = RedisConfig::new(url)
            .prefix(prefix)
            .timeout(CLI_TIMEOUT)
            .connect_timeout(CLI_TIMEOUT);
        Shared::Redis(runtime.block_on(config.connect()).with_context(context)?)
    };
    Ok((runtime, backend))
}

/// Replays a trace through the store with the trace's own times, under a
/// prefix of its own so that every run starts from fresh keys. Redis's
/// clock has microsecond resolution, so there every `t_ns` must be a whole
/// number of microseconds and durations come out rounded up to one;
/// PostgreSQL takes any time below 2^63 ns and answers exactly.
pub fn replay<R: BufRead, W: Write>(
    url: &str,
    rule: Limit,
    input: R,
    output: W,
) -> anyhow::Result<Summary> {
    let policy = Policy::new(rule);
    validate(url, &policy)?;
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    let prefix = format!("tollgate:replay:{}-{run}:", std::process::id());
    let (runtime, backend) = connect(url, &prefix)?;
    let summary = trace::replay_with(input, output, |key, t_ns, cost| {
        let key = std::str::from_utf8(key).map_err(|_| "the key is not UTF-8".to_string())?;
        let decided = match &backend {
            Shared::Postgres(pg) => runtime.block_on(pg.check_at(key, &policy, cost, t_ns)),
            Shared::Redis(redis) => {
                if t_ns % 1000 != 0 {
                    return Err(format!(
                        "t_ns {t_ns} is not a whole number of microseconds, the store \
                         clock's resolution"
                    ));
                }
                runtime.block_on(redis.check_at(key, &policy, cost, t_ns / 1000))
            }
        };
        decided.map_err(|e| e.to_string())
    })?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden() {
        for (url, shown) in [
            (
                "postgres://app:s3cret@db:5432/app",
                "postgres://app:***@db:5432/app",
            ),
            (
                "postgres://app@db/app?password=s3cret&sslmode=require",
                "postgres://app@db/app?password=***&sslmode=require",
            ),
            ("redis://:s3cret@cache:6379", "redis://:***@cache:6379"),
            ("redis://cache:6379", "redis://cache:6379"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(redact(url), shown);
        }
    }
}
