//! `tollgate loadtest`: open-loop load against a real endpoint (crate
//! `tollgate-loadtest`); this module maps flags to its configuration,
//! shows progress and writes the report.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use tollgate_cli::duration::parse_duration;
use tollgate_cli::output_file::OutputFile;
use tollgate_cli::rule_args::parse_policy;
use tollgate_core::Limit;
use tollgate_loadtest::config::{Arrivals, Backoff, Config, Mix, Rate};
use tollgate_loadtest::report::Report;

use crate::terminal::{print_summary, Bar};

const EXAMPLE: &str = "\
Example: the README's demo (3x a policy of 100 a minute with bursts of 20, per API key):

  $ tollgate serve --config examples/loadtest.yaml --upstream http://127.0.0.1:3000 \\
      --demo-upstream 127.0.0.1:3000 --no-grpc &
  $ tollgate loadtest http://127.0.0.1:8000/v1/hello --baseline http://127.0.0.1:3000/v1/hello \\
      --policy \"token_bucket 100/1m burst 20\" --rate 3x --clients 20 --duration 30s \\
      --behaviour honour=50%,ignore=30%,backoff=20%

Arrivals are scheduled from the start, never from answers: a request no connection can
send within --max-lateness of its time is dropped and counted. Only loopback targets
are accepted unless --allow-remote is given; every run stops at its bounds.";

/// Flags of `tollgate loadtest`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = EXAMPLE)]
pub struct Args {
    /// The URL under test (http://HOST:PORT/PATH).
    #[arg(value_name = "URL")]
    url: String,
    /// The same service without the limiter, loaded the same way after the
    /// main run, for the limiter's cost.
    #[arg(long, value_name = "URL")]
    baseline: Option<String>,
    /// The policy the target enforces per key: `ALGORITHM LIMIT/PERIOD [burst B]`,
    /// e.g. "token_bucket 100/1m burst 20" (for overshoot, and for --rate 3x).
    #[arg(long, value_name = "POLICY", value_parser = parse_policy)]
    policy: Option<Limit>,
    /// Requests per second per client: 50, 50/s, a multiple of the policy (3x),
    /// or max (closed loop: as fast as answers come, to measure capacity).
    #[arg(long, value_name = "RATE", default_value = "10")]
    rate: Rate,
    /// Simulated clients, each with its own key.
    #[arg(long, value_name = "N", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    clients: u32,
    /// Arrival process of each client: constant or poisson.
    #[arg(long, value_name = "KIND", default_value = "constant")]
    arrivals: Arrivals,
    /// Stop scheduling after this long (10s unless --requests is given).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    duration: Option<u64>,
    /// Stop after this many scheduled requests (all clients).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    requests: Option<u64>,
    /// Connections at most, each kept alive and carrying one request at a time.
    #[arg(long, value_name = "N", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..=65_536))]
    connections: u64,
    /// A request not answered within this is an error (the connection is closed).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    timeout: u64,
    /// A request no connection could send within this of its time is dropped and counted.
    #[arg(long, value_name = "DURATION", default_value = "50ms", value_parser = parse_duration)]
    max_lateness: u64,
    /// The request header carrying each client's key.
    #[arg(long, value_name = "NAME", default_value = "x-api-key")]
    key_header: String,
    /// Each client's key; `{i}` is replaced by the client's number.
    #[arg(long, value_name = "PATTERN", default_value = "client-{i}")]
    key_pattern: String,
    /// What clients do with a 429: ignore, honour (Retry-After), backoff, or a
    /// mix such as honour=70%,ignore=30%.
    #[arg(
        long = "behaviour",
        alias = "behavior",
        value_name = "MIX",
        default_value = "ignore"
    )]
    mix: Mix,
    /// Retries at most after a refusal (honour and backoff).
    #[arg(long, value_name = "N", default_value_t = 4)]
    max_retries: u32,
    /// The first backoff's bound (doubles per retry, full jitter).
    #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = parse_duration)]
    backoff_base: u64,
    /// The largest backoff bound.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    backoff_cap: u64,
    /// Seed of the random draws (Poisson gaps, jitter): same seed, same schedule.
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// Accept a target that is not a loopback address (only for a service you run).
    #[arg(long)]
    allow_remote: bool,
    /// Directory for report.md, report.json and the charts (SVG and PNG); created if missing.
    #[arg(long, value_name = "DIR", default_value = "tollgate-loadtest")]
    out: PathBuf,
}

impl Args {
    fn config(self) -> Config {
        let mut c = Config::new(self.url);
        c.baseline = self.baseline;
        c.policy = self.policy;
        c.clients = self.clients;
        c.rate = self.rate;
        c.arrivals = self.arrivals;
        c.duration = match (self.duration, self.requests) {
            (Some(ns), _) => Some(Duration::from_nanos(ns)),
            (None, Some(_)) => None,
            (None, None) => Some(Duration::from_secs(10)),
        };
        c.requests = self.requests;
        c.connections = self.connections as usize;
        c.timeout = Duration::from_nanos(self.timeout);
        c.max_lateness = Duration::from_nanos(self.max_lateness);
        c.key_header = self.key_header;
        c.key_pattern = self.key_pattern;
        c.mix = self.mix;
        c.backoff = Backoff {
            max_retries: self.max_retries,
            base: Duration::from_nanos(self.backoff_base),
            cap: Duration::from_nanos(self.backoff_cap),
        };
        c.seed = self.seed;
        c.allow_remote = self.allow_remote;
        c
    }
}

/// Runs the load test, prints the report and writes it with the charts.
pub fn run(args: Args) -> anyhow::Result<()> {
    let out = args.out.clone();
    let config = args.config();
    let bar = Bar::new("loading", tollgate_loadtest::progress_units(&config))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let report = runtime.block_on(tollgate_loadtest::loadtest(&config, &bar))?;
    bar.0.finish_and_clear();
    write(&out, &report)?;
    let summary = format!(
        "{}\nWrote {dir}/report.md, {dir}/report.json and {} charts (SVG and PNG).\n",
        report.to_text(),
        report.charts.len(),
        dir = out.display()
    );
    print_summary(&summary)
}

/// `report.md`, `report.json` (each replaced in one step) and the charts.
fn write(dir: &Path, report: &Report) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (name, text) in [
        ("report.md", report.to_markdown()),
        ("report.json", report.to_json()),
    ] {
        let path = dir.join(name);
        let fail = || format!("cannot write {}", path.display());
        let mut file = OutputFile::create(&path).with_context(fail)?;
        file.write_all(text.as_bytes()).with_context(fail)?;
        file.commit().with_context(fail)?;
    }
    for chart in report.charts() {
        tollgate_sim::charts::render(&chart, dir).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Result<Args, clap::Error> {
        crate::terminal::parse_args("loadtest", argv)
    }

    #[test]
    fn flags_map_to_the_configuration() {
        let c = parse(&[
            "http://127.0.0.1:8000/v1",
            "--policy",
            "token_bucket 100/1m burst 20",
            "--rate",
            "3x",
            "--behaviour",
            "honour=70%,ignore=30%",
            "--requests",
            "500",
        ])
        .unwrap()
        .config();
        assert_eq!(c.rate, Rate::Multiple(3.0));
        assert_eq!(c.rate.per_second(c.policy.as_ref()).unwrap(), Some(5.0));
        assert_eq!((c.duration, c.requests), (None, Some(500)));
        assert_eq!(c.mix.0.len(), 2);
        let c = parse(&["http://127.0.0.1:1/"]).unwrap().config();
        assert_eq!(c.duration, Some(Duration::from_secs(10)));
    }

    #[test]
    fn bad_flags_are_refused() {
        for argv in [
            &["http://x/", "--rate", "0"][..],
            &["http://x/", "--policy", "token_bucket 100"],
            &["http://x/", "--behaviour", "honour=50%"],
            &["http://x/", "--clients", "0"],
            &["http://x/", "--arrivals", "bursty"],
            &["http://x/", "--duration", "10"],
        ] {
            assert!(parse(argv).is_err(), "{argv:?}");
        }
    }

    #[test]
    fn remote_targets_are_refused_before_any_traffic() {
        let args = parse(&[
            "http://192.0.2.7:80/",
            "--duration",
            "1s",
            "--out",
            "/nonexistent/x",
        ])
        .unwrap();
        let err = run(args).unwrap_err().to_string();
        assert!(err.contains("--allow-remote"), "{err}");
    }
}
