//! Decisions through a shared store (`--store URL`): Redis or Redis Cluster,
//! through `tollgate-redis`, with the store's own clock or a trace's times.

use std::future::Future;
use std::io::{BufRead, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use tokio::runtime::Runtime;
use tollgate::{BackendError, Policy};
use tollgate_cli::trace::{self, Summary};
use tollgate_core::Limit;
use tollgate_redis::exact::{self, MAX_TIME_US};
use tollgate_redis::{redact, RedisBackend, RedisConfig, CLUSTER_SCHEME};

/// A runtime and a connected backend for `url` under `prefix`, each call
/// bounded by `timeout`.
pub fn connect(
    url: &str,
    prefix: &str,
    timeout: Duration,
) -> anyhow::Result<(Runtime, RedisBackend)> {
    let supported = ["redis://", "rediss://", "unix://", CLUSTER_SCHEME];
    // Shown without its credentials, wherever it is shown.
    let shown = redact(url);
    if !supported.iter().any(|scheme| url.starts_with(scheme)) {
        bail!(
            "unsupported store `{shown}`: expected redis://HOST:PORT, rediss://HOST:PORT \
             or {CLUSTER_SCHEME}HOST:PORT[,HOST:PORT...]"
        );
    }
    connect_with(
        url,
        RedisConfig::new(url)
            .prefix(prefix)
            .timeout(timeout)
            .connect(),
    )
}

/// A runtime for the command's store calls, and the backend `connecting`
/// yields on it; a failure names the store `url` without its credentials.
pub fn connect_with<B>(
    url: &str,
    connecting: impl Future<Output = Result<B, BackendError>>,
) -> anyhow::Result<(Runtime, B)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let backend = runtime
        .block_on(connecting)
        .with_context(|| format!("cannot use the store `{}`", redact(url)))?;
    Ok((runtime, backend))
}

/// A key prefix no earlier replay used, so a replay starts from fresh keys.
pub fn replay_prefix() -> anyhow::Result<String> {
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    Ok(format!("tollgate:replay:{}-{run}:", std::process::id()))
}

/// Replays a trace through the store with the trace's own times, under a
/// prefix of its own so that every run starts from fresh keys. The store's
/// clock has microsecond resolution, so every `t_ns` must be a whole number
/// of microseconds; durations come out rounded up to the microsecond. Keys
/// may be any bytes, as in process.
///
/// The script computes exactly with times up to 2^52 microseconds, so the
/// times are moved (by a whole number of periods for the windows, which
/// keeps every decision) to put the trace's first time 2^51 microseconds
/// (about 71 years) into that range: any trace that stays within 71 years
/// either side of its first request replays, wherever it starts.
pub fn replay<R: BufRead, W: Write>(
    url: &str,
    rule: Limit,
    timeout: Duration,
    input: R,
    output: W,
) -> anyhow::Result<Summary> {
    let policy = Policy::new(rule);
    let unit = exact::encode(&rule)?.time_unit_us();
    let prefix = replay_prefix()?;
    let (runtime, backend) = connect(url, &prefix, timeout)?;
    let mut base = None;
    let summary = trace::replay_with(input, output, |key, t_ns, cost| {
        if t_ns % 1000 != 0 {
            return Err(format!(
                "t_ns {t_ns} is not a whole number of microseconds, the store clock's resolution"
            ));
        }
        let t_us = t_ns / 1000;
        let base: u64 = *base.get_or_insert((t_us.saturating_sub(MAX_TIME_US / 2)) / unit * unit);
        let at = t_us.checked_sub(base).filter(|&at| at <= MAX_TIME_US);
        let Some(at) = at else {
            return Err(format!(
                "t_ns {t_ns} is too far from the trace's first time: the store replays \
                 exactly from {}ns to {}ns (2^52 microseconds, about 142 years)",
                base as u128 * 1000,
                (base as u128 + MAX_TIME_US as u128) * 1000
            ));
        };
        runtime
            .block_on(backend.check_at(key, &policy, cost, at))
            .map_err(|e| e.to_string())
    })?;
    Ok(summary)
}
