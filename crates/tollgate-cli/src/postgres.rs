//! `--store postgres://...`: decisions through `tollgate-postgres`, kept
//! apart from the Redis paths of `store`. Replays are exact at any
//! nanosecond; the store's own clock has microsecond resolution.

use std::io::{BufRead, Write};
use std::time::Duration;

use tokio::runtime::Runtime;
use tollgate::Policy;
use tollgate_cli::trace::{self, Summary};
use tollgate_core::Limit;
use tollgate_postgres::{PostgresBackend, PostgresConfig};

/// Whether `url` names a PostgreSQL store.
pub fn is_postgres(url: &str) -> bool {
    ["postgres://", "postgresql://"]
        .iter()
        .any(|s| url.starts_with(s))
}

/// A runtime and a backend for `url` under `prefix`, the schema migrated.
pub fn connect(
    url: &str,
    prefix: &str,
    timeout: Duration,
) -> anyhow::Result<(Runtime, PostgresBackend)> {
    let config = PostgresConfig::new(url)
        .prefix(prefix)
        .timeout(timeout)
        .cleanup_every(None);
    crate::store::connect_with(url, config.connect())
}

/// Replays a trace with its own times under a fresh key prefix: exactly the
/// in-process replay's output.
pub fn replay<R: BufRead, W: Write>(
    url: &str,
    rule: Limit,
    timeout: Duration,
    input: R,
    output: W,
) -> anyhow::Result<Summary> {
    let policy = Policy::new(rule);
    let prefix = crate::store::replay_prefix()?;
    let (runtime, backend) = connect(url, &prefix, timeout)?;
    let summary = trace::replay_with(input, output, |key, t_ns, cost| {
        let key = std::str::from_utf8(key).map_err(|_| "the key is not UTF-8".to_string())?;
        runtime
            .block_on(backend.check_at(key, &policy, cost, t_ns))
            .map_err(|e| e.to_string())
    })?;
    Ok(summary)
}
