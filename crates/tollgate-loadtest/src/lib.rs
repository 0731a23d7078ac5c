//! The load generator behind `tollgate loadtest`: open-loop traffic from
//! simulated clients, each with its own key, against a real endpoint, and a
//! report of what the clients got.
//!
//! - Arrivals are constant or Poisson per client, scheduled from the start
//!   instant ([`schedule`]); a slow server never slows the offered load:
//!   requests no connection could send in time are dropped and counted.
//! - Clients ignore 429s, honour `Retry-After` (and retry exactly then), or
//!   back off exponentially with full jitter ([`config::Behaviour`]), mixed
//!   in any shares.
//! - The report ([`report`]) has status counts, the refusals' fields
//!   (parsed as Structured Fields), each client's peak against what the
//!   policy allows ([`bound`]), latency percentiles, and the limiter's cost
//!   against a baseline URL.
//! - HTTP/1.1 with keep-alive over at most `connections` connections; only
//!   loopback targets unless allowed ([`target`]); every run stops at its
//!   bounds, a hung server included (per-request timeout).
//!
//! ```no_run
//! # async fn f() -> Result<(), tollgate_loadtest::Error> {
//! use tollgate_loadtest::config::{Config, Rate};
//! let mut config = Config::new("http://127.0.0.1:8000/");
//! config.rate = Rate::PerSecond(50.0);
//! let report = tollgate_loadtest::loadtest(&config, &()).await?;
//! println!("{}", report.to_text());
//! # Ok(()) }
//! ```

pub mod bound;
pub mod client;
pub mod config;
pub mod demo;
pub mod fields;
pub mod report;
pub mod run;
pub mod schedule;
pub mod target;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use config::{Config, Rate};
use report::Report;
pub use tollgate_sim::Progress;

/// Why a load test did not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The target or baseline URL.
    #[error("invalid target {0}")]
    Target(String),
    /// Any other setting.
    #[error("{0}")]
    Config(String),
}

/// Units of progress a run of `config` reports: milliseconds of its
/// duration bound, or else its count bound, per URL.
pub fn progress_units(config: &Config) -> u64 {
    let per_run = match (config.duration, config.requests) {
        (Some(d), _) => d.as_millis() as u64,
        (None, Some(n)) => n,
        (None, None) => 0,
    };
    per_run * (1 + u64::from(config.baseline.is_some()))
}

/// Runs the load test (and its baseline, after it) and reports.
pub async fn loadtest(config: &Config, progress: &dyn Progress) -> Result<Report, Error> {
    if config.duration.is_none() && config.requests.is_none() {
        return Err(Error::Config(
            "a load test needs a bound: a duration, a request count or both".into(),
        ));
    }
    if config.clients == 0 || config.connections == 0 {
        return Err(Error::Config(
            "clients and connections must be at least 1".into(),
        ));
    }
    if config.duration.is_none() && config.rate == Rate::Max {
        return Err(Error::Config(
            "a closed-loop run (rate max) needs a duration".into(),
        ));
    }
    let rate = config
        .rate
        .per_second(config.policy.as_ref())
        .map_err(Error::Config)?;
    let target = target::Target::resolve(&config.url, config.allow_remote).await?;
    let baseline = match &config.baseline {
        Some(url) => Some(target::Target::resolve(url, config.allow_remote).await?),
        None => None,
    };
    let main = tracked(config, target, rate, progress).await?;
    let base = match baseline {
        Some(b) => Some(tracked(config, b, rate, progress).await?),
        None => None,
    };
    Ok(Report::new(config, rate, &main, base.as_ref()))
}

/// One run, advancing `progress` every 100 ms as the run goes.
async fn tracked(
    config: &Config,
    target: target::Target,
    rate: Option<f64>,
    progress: &dyn Progress,
) -> Result<run::Outcome, Error> {
    let offered = Arc::new(AtomicU64::new(0));
    let total = progress_units(config) / (1 + u64::from(config.baseline.is_some()));
    let start = tokio::time::Instant::now();
    let done_units = || match config.duration {
        Some(_) => (start.elapsed().as_millis() as u64).min(total),
        None => offered.load(Ordering::Relaxed).min(total),
    };
    let work = run::run(config, target, rate, Arc::clone(&offered));
    tokio::pin!(work);
    let mut reported = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let outcome = loop {
        tokio::select! {
            outcome = &mut work => break outcome?,
            _ = tick.tick() => {
                let now = done_units();
                progress.advance(now - reported);
                reported = now;
            }
        }
    };
    progress.advance(total - reported);
    Ok(outcome)
}
