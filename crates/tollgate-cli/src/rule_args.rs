//! The flags that name one rule (algorithm and quota), shared by every
//! subcommand that decides requests.

use anyhow::{bail, Context};
use tollgate_core::{Algorithm, Limit, Quota};

use crate::duration::parse_duration;

/// `--algorithm --limit --period [--burst]`, flattened into a subcommand.
#[derive(clap::Args, Debug, Clone)]
pub struct RuleArgs {
    /// Algorithm: fixed_window, sliding_log, sliding_counter, token_bucket,
    /// gcra, leaky_bucket or leaky_queue.
    #[arg(long, value_name = "NAME")]
    pub algorithm: Algorithm,
    /// Cost units admitted per period.
    #[arg(long, value_name = "N")]
    pub limit: u64,
    /// The period: an integer with a unit ns, us, ms, s, m, h or d (e.g. 1m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub period: u64,
    /// Bucket capacity for token_bucket, gcra and leaky_bucket (at least 1:
    /// an empty bucket admits nothing); for leaky_queue, how many requests
    /// wait while one is served (0 for none, nginx's default). Defaults to
    /// the limit; the window algorithms ignore it, 0 included.
    #[arg(long, value_name = "B")]
    pub burst: Option<u64>,
}

impl RuleArgs {
    /// The validated rule, or the quota's error in words.
    pub fn rule(&self) -> anyhow::Result<Limit> {
        let burst = self.burst.unwrap_or(self.limit);
        let bucket = self.algorithm.uses_burst() && self.algorithm != Algorithm::LeakyQueue;
        if bucket && burst == 0 {
            bail!(
                "invalid quota: --burst 0 has no meaning for {}: a bucket of capacity 0 \
                 admits nothing; give at least 1",
                self.algorithm
            );
        }
        let quota = Quota::with_parts(self.limit, self.period, burst).context("invalid quota")?;
        Ok(Limit::new(self.algorithm, quota))
    }
}
