//! `--store postgres://...`: decisions through `tollgate-postgres`, kept
//! apart from the Redis paths of `store`. Replays are exact at any
//! nanosecond; the store's own clock has microsecond resolution.

use std::io::{BufRead, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use tokio::runtime::Runtime;
use tollgate::{Backend, Policy};
use tollgate_cli::trace::{self, Summary};
use tollgate_core::{Decision, Limit};
use tollgate_postgres::{PostgresBackend, PostgresConfig};

/// Deadline of each call from the command line, longer than a service's.
const CLI_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether `url` names a PostgreSQL store.
pub fn is_postgres(url: &str) -> bool {
    ["postgres://", "postgresql://"]
        .iter()
        .any(|s| url.starts_with(s))
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

/// A runtime and a backend for `url` under `prefix`, the schema migrated.
pub fn connect(url: &str, prefix: &str) -> anyhow::Result<(Runtime, PostgresBackend)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let config = PostgresConfig::new(url)
        .prefix(prefix)
        .timeout(CLI_TIMEOUT)
        .connect_timeout(CLI_TIMEOUT)
        .cleanup_every(None);
    let backend = runtime
        .block_on(config.connect())
        .with_context(|| format!("cannot use the store `{}`", redact(url)))?;
    Ok((runtime, backend))
}

/// One decision with the database's clock.
pub fn check(
    url: &str,
    prefix: &str,
    policy: &Policy,
    key: &str,
    cost: u64,
) -> anyhow::Result<Decision> {
    let (runtime, backend) = connect(url, prefix)?;
    Ok(runtime.block_on(backend.check(key, policy, cost))?)
}

/// Replays a trace with its own times under a fresh key prefix: exactly the
/// in-process replay's output.
pub fn replay<R: BufRead, W: Write>(
    url: &str,
    rule: Limit,
    input: R,
    output: W,
) -> anyhow::Result<Summary> {
    let policy = Policy::new(rule);
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    let prefix = format!("tollgate:replay:{}-{run}:", std::process::id());
    let (runtime, backend) = connect(url, &prefix)?;
    let summary = trace::replay_with(input, output, |key, t_ns, cost| {
        let key = std::str::from_utf8(key).map_err(|_| "the key is not UTF-8".to_string())?;
        runtime
            .block_on(backend.check_at(key, &policy, cost, t_ns))
            .map_err(|e| e.to_string())
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
            ("postgres://db/app", "postgres://db/app"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(redact(url), shown);
        }
    }
}
