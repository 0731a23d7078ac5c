//! Decisions through a shared store (`--store URL`): Redis or Redis Cluster,
//! through `tollgate-redis`, with the store's own clock or a trace's times.

use std::io::{BufRead, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use tokio::runtime::Runtime;
use tollgate::Policy;
use tollgate_cli::trace::{self, Summary};
use tollgate_core::Limit;
use tollgate_redis::{RedisBackend, RedisConfig, CLUSTER_SCHEME};

/// Deadline of each store call from the command line: a one-off command can
/// wait longer than a service on its request path would.
const CLI_TIMEOUT: Duration = Duration::from_secs(2);

/// A runtime and a connected backend for `url` under `prefix`.
pub fn connect(url: &str, prefix: &str) -> anyhow::Result<(Runtime, RedisBackend)> {
    let supported = ["redis://", "rediss://", "unix://", CLUSTER_SCHEME];
    if !supported.iter().any(|scheme| url.starts_with(scheme)) {
        bail!(
            "unsupported store `{url}`: expected redis://HOST:PORT, rediss://HOST:PORT \
             or {CLUSTER_SCHEME}HOST:PORT[,HOST:PORT...]"
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let config = RedisConfig::new(url)
        .prefix(prefix)
        .timeout(CLI_TIMEOUT)
        .connect_timeout(CLI_TIMEOUT);
    let backend = runtime
        .block_on(config.connect())
        .with_context(|| format!("cannot use the store `{url}`"))?;
    Ok((runtime, backend))
}

/// Replays a trace through the store with the trace's own times, under a
/// prefix of its own so that every run starts from fresh keys. The store's
/// clock has microsecond resolution, so every `t_ns` must be a whole number
/// of microseconds; durations come out rounded up to the microsecond.
pub fn replay<R: BufRead, W: Write>(
    url: &str,
    rule: Limit,
    input: R,
    output: W,
) -> anyhow::Result<Summary> {
    let policy = Policy::new(rule);
    RedisBackend::validate(&policy)?;
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    let prefix = format!("tollgate:replay:{}-{run}:", std::process::id());
    let (runtime, backend) = connect(url, &prefix)?;
    let summary = trace::replay_with(input, output, |key, t_ns, cost| {
        if t_ns % 1000 != 0 {
            return Err(format!(
                "t_ns {t_ns} is not a whole number of microseconds, the store clock's resolution"
            ));
        }
        let key = std::str::from_utf8(key).map_err(|_| "the key is not UTF-8".to_string())?;
        runtime
            .block_on(backend.check_at(key, &policy, cost, t_ns / 1000))
            .map_err(|e| e.to_string())
    })?;
    Ok(summary)
}
