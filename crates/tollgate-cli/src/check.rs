//! `tollgate check`: one decision by a shared store, with the store's clock.

use tollgate::{Backend, Policy};
use tollgate_cli::rule_args::RuleArgs;
use tollgate_core::{Decision, RetryAfter};
use tollgate_redis::{RedisBackend, DEFAULT_PREFIX};

use crate::store;

/// Flags of `tollgate check`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Prints one JSON object: {\"allowed\":..,\"limit\":..,\"remaining\":..,\"retry_after_ms\":..,\"reset_after_ms\":..};
durations in milliseconds rounded up, retry_after_ms -1 when the cost can never fit.")]
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
    /// Whose budget is spent.
    #[arg(value_name = "KEY")]
    key: String,
}

/// Makes the decision and prints it.
pub fn run(args: Args) -> anyhow::Result<()> {
    let policy = Policy::new(args.rule.rule()?);
    let decision = if crate::postgres::is_postgres(&args.store) {
        crate::postgres::check(&args.store, &args.prefix, &policy, &args.key, args.cost)?
    } else {
        RedisBackend::validate(&policy)?;
        let (runtime, backend) = store::connect(&args.store, &args.prefix)?;
        runtime.block_on(backend.check(&args.key, &policy, args.cost))?
    };
    println!("{}", to_json(&decision));
    Ok(())
}

/// Milliseconds, rounded up so that a client never retries too early.
fn ms(ns: u64) -> u64 {
    ns.div_ceil(1_000_000)
}

fn to_json(d: &Decision) -> String {
    let retry_after_ms = match d.retry_after {
        RetryAfter::Now => 0,
        RetryAfter::After(ns) => ms(ns) as i128,
        RetryAfter::Never => -1,
    };
    format!(
        "{{\"allowed\":{},\"limit\":{},\"remaining\":{},\"retry_after_ms\":{},\"reset_after_ms\":{}}}",
        d.allowed,
        d.limit,
        d.remaining,
        retry_after_ms,
        ms(d.reset_after)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_rounds_durations_up_and_marks_never() {
        let d = Decision {
            allowed: false,
            limit: 10,
            remaining: 0,
            retry_after: RetryAfter::After(1_000_001),
            reset_after: 6_000_000_000,
            delay: 0,
        };
        assert_eq!(
            to_json(&d),
            "{\"allowed\":false,\"limit\":10,\"remaining\":0,\"retry_after_ms\":2,\"reset_after_ms\":6000}"
        );
        let never = Decision {
            retry_after: RetryAfter::Never,
            ..d
        };
        assert!(to_json(&never).contains("\"retry_after_ms\":-1"));
    }
}
