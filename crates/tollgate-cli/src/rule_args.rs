//! The flags that name one rule (algorithm and quota), shared by every
//! subcommand that decides requests, and the same rule in one phrase
//! ([`parse_policy`]: `token_bucket 100/1m burst 20`).

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

/// Parses one rule written as a phrase: `ALGORITHM LIMIT/PERIOD [burst B]`,
/// e.g. `token_bucket 100/1m burst 20` or `fixed_window 5/1s`, validated as
/// [`RuleArgs::rule`] validates the flags (same defaults, same errors).
///
/// Usable directly as a clap `value_parser`.
pub fn parse_policy(text: &str) -> anyhow::Result<Limit> {
    const HINT: &str =
        "expected ALGORITHM LIMIT/PERIOD [burst B], e.g. `token_bucket 100/1m burst 20`";
    let words: Vec<&str> = text.split_whitespace().collect();
    let (algorithm, rate, burst) = match words.as_slice() {
        [algorithm, rate] => (algorithm, rate, None),
        [algorithm, rate, word, burst] if word.eq_ignore_ascii_case("burst") => {
            (algorithm, rate, Some(burst))
        }
        _ => bail!("invalid policy `{text}`: {HINT}"),
    };
    let algorithm: Algorithm = algorithm
        .parse()
        .with_context(|| format!("invalid policy `{text}`"))?;
    let Some((limit, period)) = rate.split_once('/') else {
        bail!("invalid policy `{text}`: `{rate}` is not LIMIT/PERIOD; {HINT}");
    };
    let limit = limit
        .parse::<u64>()
        .with_context(|| format!("invalid policy `{text}`: `{limit}` is not a whole number"))?;
    let period = parse_duration(period).with_context(|| format!("invalid policy `{text}`"))?;
    let burst = burst
        .map(|b| b.parse::<u64>())
        .transpose()
        .with_context(|| format!("invalid policy `{text}`: the burst is not a whole number"))?;
    RuleArgs {
        algorithm,
        limit,
        period,
        burst,
    }
    .rule()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phrases_parse_like_the_flags() {
        let rule = parse_policy("token_bucket 100/1m burst 20").unwrap();
        assert_eq!(rule.algorithm, Algorithm::TokenBucket);
        assert_eq!(
            (
                rule.quota.limit(),
                rule.quota.period_ns(),
                rule.quota.burst()
            ),
            (100, 60_000_000_000, 20)
        );
        // The burst defaults to the limit, as with `--burst` absent.
        let rule = parse_policy("  gcra 5/1s ").unwrap();
        assert_eq!(rule.quota.burst(), 5);
        assert_eq!(
            parse_policy("fixed-window 7/90s BURST 3")
                .unwrap()
                .quota
                .limit(),
            7
        );
    }

    #[test]
    fn bad_phrases_say_what_is_wrong() {
        for (bad, says) in [
            ("", "expected ALGORITHM"),
            ("token_bucket", "expected ALGORITHM"),
            ("bucket 100/1m", "invalid policy"),
            ("gcra 100", "is not LIMIT/PERIOD"),
            ("gcra x/1m", "not a whole number"),
            ("gcra 100/1", "invalid policy"),
            ("gcra 0/1m", "invalid quota"),
            ("gcra 10/1m burst 0", "--burst 0"),
            ("gcra 10/1m burst x", "burst is not"),
            ("gcra 10/1m size 3", "expected ALGORITHM"),
        ] {
            let err = format!("{:#}", parse_policy(bad).unwrap_err());
            assert!(err.contains(says), "{bad:?}: {err}");
        }
    }
}
