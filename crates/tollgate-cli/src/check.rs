//! `tollgate check`: one decision by a shared store, with the store's clock.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use tokio::runtime::Runtime;
use tollgate::{Backend, BackendError, BackendExt, Policy};
use tollgate_cli::rule_args::RuleArgs;
use tollgate_core::{Decision, Limit, RetryAfter};
use tollgate_redis::{RedisBackend, DEFAULT_PREFIX};

use crate::failure::{Failure, STORE, USAGE};
use crate::store;
use crate::timeout::Timeout;

/// Exit status of a denied request; 0 is admitted.
const DENIED: u8 = 1;

/// Flags of `tollgate check`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Prints one JSON object, e.g.
  {\"allowed\":true,\"limit\":100,\"period_ns\":60000000000,\"burst\":10,\"capacity\":10,
   \"remaining\":9,\"retry_after_ms\":0,\"reset_after_ms\":600,\"delay_ms\":0}
limit, period_ns and burst are the quota as given (burst null for the windows, which
ignore it; the limit when --burst is absent); capacity is the most cost the algorithm
admits at one instant (the limit for windows, the burst for buckets, burst + 1 for
leaky_queue); remaining is the cost still admitted now; retry_after_ms is -1 when the
cost can never fit; delay_ms is how long an admitted leaky_queue request waits before
it is served (0 for the others). Durations in milliseconds, rounded up.

Exit status: 0 admitted, 1 denied, 2 usage error (bad flags, a quota the store cannot
enforce exactly), 3 the store failed (unreachable, too slow, an error). The JSON is
printed for 0 and 1 only.")]
pub struct Args {
    /// The store: redis://HOST:PORT, redis+cluster://HOST:PORT[,HOST:PORT...]
    /// for a Redis Cluster, or postgres://USER@HOST[:PORT]/DB.
    #[arg(long, value_name = "URL")]
    store: String,
    #[command(flatten)]
    rule: RuleArgs,
    /// The request's cost; 0 peeks without charging.
    #[arg(long, value_name = "C", default_value_t = 1)]
    cost: u64,
    /// Prefix of the store's keys.
    #[arg(long, value_name = "PREFIX", default_value = DEFAULT_PREFIX)]
    prefix: String,
    #[command(flatten)]
    timeout: Timeout,
    /// Whose budget is spent.
    #[arg(value_name = "KEY")]
    key: String,
}

/// Makes the decision, prints it and says by the exit status whether the
/// request was admitted.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let rule = args.rule.rule().map_err(|e| Failure::new(USAGE, e))?;
    let policy = Policy::new(rule);
    let timeout = args.timeout.duration();
    let decision = if crate::postgres::is_postgres(&args.store) {
        let (runtime, backend) = crate::postgres::connect(&args.store, &args.prefix, timeout)
            .map_err(connect_failure)?;
        decide(&runtime, &backend, &args.key, &policy, args.cost)?
    } else {
        RedisBackend::validate(&policy).map_err(backend_failure)?;
        let (runtime, backend) =
            store::connect(&args.store, &args.prefix, timeout).map_err(connect_failure)?;
        decide(&runtime, &backend, &args.key, &policy, args.cost)?
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", to_json(&rule, &decision))
        .and_then(|()| out.flush())
        .context("writing the decision")?;
    Ok(if decision.allowed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(DENIED)
    })
}

/// One decision through `backend`, with the store's clock.
fn decide(
    runtime: &Runtime,
    backend: &impl Backend,
    key: &str,
    policy: &Policy,
    cost: u64,
) -> Result<Decision, Failure> {
    let policy = backend.prepare(policy).map_err(backend_failure)?;
    runtime
        .block_on(backend.check(key, &policy, cost))
        .map_err(backend_failure)
}

/// A failed connection: the store's own error, or else a bad URL.
fn connect_failure(e: anyhow::Error) -> Failure {
    let status = e.downcast_ref::<BackendError>().map_or(USAGE, status_of);
    Failure::new(status, e)
}

/// A store's refusal of the request itself is a usage error; anything else
/// is the store failing.
fn status_of(error: &BackendError) -> u8 {
    match error {
        BackendError::UnsupportedPolicy(_) | BackendError::InvalidKey(_) => USAGE,
        _ => STORE,
    }
}

fn backend_failure(error: BackendError) -> Failure {
    Failure::new(status_of(&error), error)
}

/// Milliseconds, rounded up so that a client never retries too early.
fn ms(ns: u64) -> u64 {
    ns.div_ceil(1_000_000)
}

fn to_json(rule: &Limit, d: &Decision) -> String {
    let quota = &rule.quota;
    let burst = if rule.algorithm.uses_burst() {
        quota.burst().to_string()
    } else {
        "null".into()
    };
    let retry_after_ms = match d.retry_after {
        RetryAfter::Now => 0,
        RetryAfter::After(ns) => ms(ns) as i128,
        RetryAfter::Never => -1,
    };
    format!(
        "{{\"allowed\":{},\"limit\":{},\"period_ns\":{},\"burst\":{burst},\"capacity\":{},\
         \"remaining\":{},\"retry_after_ms\":{retry_after_ms},\"reset_after_ms\":{},\
         \"delay_ms\":{}}}",
        d.allowed,
        quota.limit(),
        quota.period_ns(),
        d.limit,
        d.remaining,
        ms(d.reset_after),
        ms(d.delay),
    )
}

#[cfg(test)]
mod tests {
    use tollgate_core::{Algorithm, Quota};

    use super::*;

    #[test]
    fn json_reports_the_quota_as_given_and_rounds_durations_up() {
        let quota = Quota::per_minute(100).unwrap().with_burst(10).unwrap();
        let d = Decision {
            allowed: false,
            limit: 10,
            remaining: 0,
            retry_after: RetryAfter::After(1_000_001),
            reset_after: 6_000_000_000,
            delay: 0,
        };
        assert_eq!(
            to_json(&Limit::new(Algorithm::Gcra, quota), &d),
            "{\"allowed\":false,\"limit\":100,\"period_ns\":60000000000,\"burst\":10,\
             \"capacity\":10,\"remaining\":0,\"retry_after_ms\":2,\"reset_after_ms\":6000,\
             \"delay_ms\":0}"
        );
        let never = Decision {
            retry_after: RetryAfter::Never,
            delay: 1,
            ..d
        };
        let window = to_json(&Limit::new(Algorithm::FixedWindow, quota), &never);
        assert!(window.contains("\"burst\":null,"), "{window}");
        assert!(window.contains("\"retry_after_ms\":-1,"), "{window}");
        assert!(window.contains("\"delay_ms\":1}"), "{window}");
    }
}
