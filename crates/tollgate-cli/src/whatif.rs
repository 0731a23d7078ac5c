//! `tollgate what-if`: candidate rate limits decided over an access log,
//! with a report of whom each would refuse. The engine is
//! `tollgate-whatif`; this module reads the flags and draws the progress bar.

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use ipnet::IpNet;
use tollgate_cli::duration::parse_duration;
use tollgate_cli::output_file::OutputFile;
use tollgate_cli::rule_args::RuleArgs;
use tollgate_core::Algorithm;
use tollgate_http::{ClientIp, ForwardedHeader, Key, Routes};
use tollgate_whatif::engine::{self, Options};
use tollgate_whatif::format::FormatName;
use tollgate_whatif::keys::parse_key;
use tollgate_whatif::policy::{parse_sweep, Candidates};
use tollgate_whatif::report::Report;

/// Flags of `tollgate what-if`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Policies: --policies FILE (the configuration `tollgate serve` reads: each http rule with
its own match, key and cost; each descriptor limit keyed by --key), or one algorithm
with --algorithm, --period and --limit N or --sweep limit=FROM..TO[/COUNT|:STEP] or
limit=A,B,C, at each --burst. Each policy is decided on its own, as if it were the only rule.

Keys (--key): ip, ip/56 (IPv6 prefix), ip/24/56, header:NAME (digest), header:NAME:raw,
field:NAME (any logged field), route, host, const:VALUE; a+b joins, a|b takes the first present.

Example:
  tollgate what-if examples/access.log.gz --log-format combined-xff \\
    --trusted-proxy 10.0.0.0/8 --algorithm gcra --period 1m \\
    --sweep limit=60..600/10 --burst 20,120 --out whatif-report")]
pub struct Args {
    /// The log (plain or gzip, told by its first bytes); standard input when
    /// absent or `-`.
    #[arg(value_name = "LOG")]
    input: Option<PathBuf>,
    /// combined, combined-xff (combined + "$http_x_forwarded_for"), common,
    /// envoy-json, csv (the trace of `tollgate replay`), or an nginx
    /// log_format string such as '$remote_addr [$time_local] "$request" $http_x_api_key'.
    #[arg(long, value_name = "FORMAT", default_value = "combined")]
    log_format: String,
    /// Whose budget a request spends (see below).
    #[arg(long, value_name = "KEY", default_value = "ip")]
    key: String,
    /// A network of your proxies: when the peer is inside one, the client is
    /// the nearest untrusted hop of X-Forwarded-For (repeatable).
    #[arg(long, value_name = "CIDR")]
    trusted_proxy: Vec<IpNet>,
    /// The header the trusted proxies append to: x-forwarded-for or forwarded.
    #[arg(long, value_name = "NAME", default_value = "x-forwarded-for", value_parser = ["x-forwarded-for", "forwarded"])]
    forwarded_header: String,
    /// A route template such as /v1/users/{id} (repeatable, tried in order);
    /// other paths have numeric, UUID and long hex segments collapsed.
    #[arg(long, value_name = "TEMPLATE")]
    route: Vec<String>,
    /// The server's configuration file whose limits to try.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["algorithm", "limit", "sweep"])]
    policies: Option<PathBuf>,
    /// Algorithm: fixed_window, sliding_log, sliding_counter, token_bucket,
    /// gcra, leaky_bucket or leaky_queue.
    #[arg(long, value_name = "NAME", requires = "period")]
    algorithm: Option<Algorithm>,
    /// The period, e.g. 1m.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    period: Option<u64>,
    /// One limit per period.
    #[arg(long, value_name = "N", conflicts_with = "sweep")]
    limit: Option<u64>,
    /// Limits to sweep: limit=50..500 (10 values), limit=50..500/20,
    /// limit=50..500:25 or limit=50,100,200.
    #[arg(long, value_name = "LIMITS")]
    sweep: Option<String>,
    /// Bursts, comma-separated (each limit is tried at each); the limit when absent.
    #[arg(long, value_name = "B,...", value_delimiter = ',')]
    burst: Vec<u64>,
    /// The largest refused share of the busiest 1% of keys a sweep may
    /// recommend: 0.1% or 0.001.
    #[arg(long, value_name = "SHARE", default_value = "0.1%", value_parser = parse_share)]
    target: f64,
    /// Directory for report.md, report.json and the charts; created if missing.
    #[arg(long, value_name = "DIR", default_value = "whatif-report")]
    out: PathBuf,
    /// Also write the requests (of the first rule) as a CSV trace for `tollgate replay`.
    #[arg(long, value_name = "FILE")]
    trace_out: Option<PathBuf>,
    /// Stop at the first line that cannot be read instead of counting it.
    #[arg(long)]
    strict: bool,
    /// Threads deciding; the number of cores when absent.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    threads: Option<u32>,
}

/// `0.1%` or `0.001`, a share from 0 to 1.
fn parse_share(text: &str) -> Result<f64, String> {
    let (number, scale) = match text.strip_suffix('%') {
        Some(n) => (n, 100.0),
        None => (text, 1.0),
    };
    match number.trim().parse::<f64>() {
        Ok(v) if (0.0..=scale).contains(&v) => Ok(v / scale),
        _ => Err("expected a share such as 0.1% or 0.001, from 0 to 100%".into()),
    }
}

impl Args {
    fn candidates(&self, key: Key) -> anyhow::Result<Candidates> {
        if let Some(path) = &self.policies {
            return Candidates::load(path, &key).map_err(Into::into);
        }
        let (Some(algorithm), Some(period)) = (self.algorithm, self.period) else {
            bail!("name the policies: --policies FILE, or --algorithm, --period and --limit or --sweep");
        };
        let limits = match (&self.sweep, self.limit) {
            (Some(spec), _) => parse_sweep(spec)?,
            (None, Some(limit)) => vec![limit],
            (None, None) => bail!("give --limit N or --sweep limit=FROM..TO"),
        };
        let bursts: Vec<Option<u64>> = match self.burst.as_slice() {
            [] => vec![None],
            b => b.iter().copied().map(Some).collect(),
        };
        // The same checks as every other subcommand's rule flags.
        for &limit in &limits {
            for &burst in &bursts {
                RuleArgs {
                    algorithm,
                    limit,
                    period,
                    burst,
                }
                .rule()?;
            }
        }
        Candidates::sweep(algorithm, period, &limits, &self.burst, key).map_err(Into::into)
    }
}

/// Decides the log, prints the table and writes the report.
pub fn run(args: Args) -> anyhow::Result<()> {
    let key = parse_key(&args.key)?;
    let candidates = args.candidates(key)?;
    let routes = Routes::new(args.route.iter().cloned())?;
    let header = match args.forwarded_header.as_str() {
        "forwarded" => ForwardedHeader::Forwarded,
        _ => ForwardedHeader::XForwardedFor,
    };
    let threads = args.threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, usize::from),
        |n| n as usize,
    );
    let options = Options {
        format: FormatName::parse(&args.log_format)?,
        client_ip: ClientIp::behind(args.trusted_proxy.iter().copied(), header),
        routes,
        strict: args.strict,
        workers: threads,
    };

    let read = Arc::new(AtomicU64::new(0));
    let (source, size): (Box<dyn Read + Send>, Option<u64>) = match &args.input {
        Some(path) if path.as_os_str() != "-" => {
            let file =
                File::open(path).with_context(|| format!("cannot open `{}`", path.display()))?;
            let size = file
                .metadata()
                .ok()
                .filter(|m| m.is_file())
                .map(|m| m.len());
            (Box::new(file), size)
        }
        _ => (Box::new(io::stdin()), None),
    };
    let input =
        tollgate_whatif::input::open(source, read.clone()).context("cannot read the log")?;
    let bar = progress_bar(size)?;
    let mut progress = || bar.set_position(read.load(Ordering::Relaxed));

    let outcome = match &args.trace_out {
        Some(path) => {
            let mut file = OutputFile::create(path)
                .with_context(|| format!("cannot create `{}`", path.display()))?;
            let mut out = BufWriter::with_capacity(256 * 1024, &mut file);
            let outcome = engine::run_with_trace(
                input,
                &candidates,
                &options,
                Some(&mut out),
                &mut progress,
            )?;
            out.flush()
                .with_context(|| format!("cannot write `{}`", path.display()))?;
            drop(out);
            file.commit()
                .with_context(|| format!("cannot write `{}`", path.display()))?;
            outcome
        }
        None => engine::run(input, &candidates, &options, &mut progress)?,
    };
    bar.finish_and_clear();

    let report = Report::new(&candidates, &outcome, args.target);
    report.write(&args.out)?;
    let charts = report.charts().len();
    let summary = format!(
        "{}Wrote {dir}/report.md, {dir}/report.json and {charts} charts (SVG and PNG).\n",
        report.to_text(),
        dir = args.out.display()
    );
    // A reader that stops early (`| head`) is not an error: the report is
    // already on disk.
    match io::stdout().lock().write_all(summary.as_bytes()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            Err(e).context("cannot print the summary")
        }
        _ => Ok(()),
    }
}

/// A bar over the input's bytes on standard error when it is a terminal
/// (a spinner when the size is unknown), hidden otherwise.
fn progress_bar(size: Option<u64>) -> anyhow::Result<ProgressBar> {
    if !io::stderr().is_terminal() {
        return Ok(ProgressBar::hidden());
    }
    Ok(match size {
        Some(len) => {
            let bar = ProgressBar::new(len);
            bar.set_style(
                ProgressStyle::with_template(
                    "reading {bar:40} {percent:>3}% {bytes}/{total_bytes} eta {eta}",
                )
                .context("progress bar template")?,
            );
            bar
        }
        None => {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("reading {spinner} {bytes}")
                    .context("progress bar template")?,
            );
            bar
        }
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(argv: &[&str]) -> Result<Args, clap::Error> {
        Cli::try_parse_from(std::iter::once("what-if").chain(argv.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn shares() {
        assert_eq!(parse_share("0.1%"), Ok(0.001));
        assert_eq!(parse_share("0.25"), Ok(0.25));
        assert!(parse_share("200%").is_err());
        assert!(parse_share("-1").is_err());
        assert!(parse_share("x").is_err());
    }

    #[test]
    fn policies_must_be_named_once() {
        let none = parse(&["log"]).unwrap();
        assert!(none.candidates(Key::ip()).is_err());
        assert!(parse(&[
            "--policies",
            "f.yaml",
            "--algorithm",
            "gcra",
            "--period",
            "1m"
        ])
        .is_err());
        assert!(
            parse(&["--algorithm", "gcra", "--limit", "5"]).is_err(),
            "needs a period"
        );
        let zero = parse(&[
            "--algorithm",
            "gcra",
            "--period",
            "1m",
            "--limit",
            "5",
            "--burst",
            "0",
        ])
        .unwrap();
        assert!(zero.candidates(Key::ip()).is_err());
        let sweep = parse(&[
            "--algorithm",
            "gcra",
            "--period",
            "1m",
            "--sweep",
            "limit=10..100/10",
            "--burst",
            "5,10",
        ])
        .unwrap();
        assert_eq!(sweep.candidates(Key::ip()).unwrap().policies.len(), 20);
    }

    #[test]
    fn a_log_is_decided_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("access.log");
        let mut text = Vec::new();
        tollgate_whatif::sample::generate(3, 3_000, &mut text).unwrap();
        std::fs::write(&log, text).unwrap();
        let out = dir.path().join("report");
        let trace = dir.path().join("trace.csv");
        let args = parse(&[
            log.to_str().unwrap(),
            "--log-format",
            "combined-xff",
            "--trusted-proxy",
            "10.0.0.0/8",
            "--algorithm",
            "gcra",
            "--period",
            "1m",
            "--sweep",
            "limit=10..100/4",
            "--burst",
            "5,20",
            "--out",
            out.to_str().unwrap(),
            "--trace-out",
            trace.to_str().unwrap(),
        ])
        .unwrap();
        run(args).unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap())
                .unwrap();
        assert_eq!(json["policies"].as_array().unwrap().len(), 8);
        assert!(json["malformed"]["count"].as_u64().unwrap() < 30);
        for file in [
            "report.md",
            "whatif-sweep.png",
            "whatif-sweep.svg",
            "whatif-hours.png",
        ] {
            assert!(out.join(file).exists(), "{file}");
        }
        let trace = std::fs::read_to_string(trace).unwrap();
        assert!(trace.starts_with("t_ns,key,cost\n"));
        assert_eq!(
            trace.lines().count() as u64 - 1,
            json["policies"][0]["requests"].as_u64().unwrap()
        );
    }
}
