//! What a load test does: the target, the clients, their arrivals and
//! behaviours, and the bounds it always stops at.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;
use tollgate_core::Limit;

/// How arrivals are spaced, for each client on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// Evenly spaced; the clients' phases spread over one interval so that
    /// they do not all fire at once.
    Constant,
    /// A Poisson process: exponential gaps, drawn from the seeded RNG.
    Poisson,
}

impl FromStr for Arrivals {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "constant" => Ok(Arrivals::Constant),
            "poisson" => Ok(Arrivals::Poisson),
            _ => Err(format!(
                "unknown arrivals `{s}`: expected constant or poisson"
            )),
        }
    }
}

/// The offered load of each client.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rate {
    /// Requests per second.
    PerSecond(f64),
    /// A multiple of the policy's long-run rate (`3x`).
    Multiple(f64),
    /// Closed loop: every connection sends its next request as soon as the
    /// previous one is answered (to measure how fast the generator and the
    /// server go, as `wrk` does); there is no schedule, nothing is late.
    Max,
}

impl FromStr for Rate {
    type Err = String;

    /// `50`, `50/s`, `3x`, `max`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let positive = |n: &str| match n.parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
            _ => Err(format!(
                "invalid rate `{s}`: expected a positive number per second (50 or 50/s), \
                 a multiple of the policy (3x) or max"
            )),
        };
        if t.eq_ignore_ascii_case("max") {
            Ok(Rate::Max)
        } else if let Some(m) = t.strip_suffix(['x', 'X']) {
            positive(m).map(Rate::Multiple)
        } else {
            positive(t.strip_suffix("/s").unwrap_or(t)).map(Rate::PerSecond)
        }
    }
}

impl Rate {
    /// Requests per second per client, `None` for [`Rate::Max`].
    pub fn per_second(self, policy: Option<&Limit>) -> Result<Option<f64>, String> {
        match self {
            Rate::PerSecond(r) => Ok(Some(r)),
            Rate::Multiple(m) => {
                let p = policy.ok_or("a rate given as a multiple (3x) needs --policy")?;
                Ok(Some(m * policy_rate(p)))
            }
            Rate::Max => Ok(None),
        }
    }
}

/// The policy's long-run rate, per second.
pub fn policy_rate(limit: &Limit) -> f64 {
    limit.quota.limit() as f64 * 1e9 / limit.quota.period_ns() as f64
}

/// What a client does with a 429.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Behaviour {
    /// Keeps to its schedule; refused requests are not retried.
    Ignore,
    /// Sends nothing until `Retry-After` has passed, then retries the
    /// refused request exactly then (scheduled arrivals in between are
    /// withheld, not sent late).
    Honour,
    /// Retries the refused request after an exponential backoff with full
    /// jitter, up to the retry cap; keeps to its schedule meanwhile.
    Backoff,
}

impl Behaviour {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Behaviour::Ignore => "ignore",
            Behaviour::Honour => "honour",
            Behaviour::Backoff => "backoff",
        }
    }
}

impl fmt::Display for Behaviour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Behaviour {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "ignore" => Ok(Behaviour::Ignore),
            "honour" | "honor" => Ok(Behaviour::Honour),
            "backoff" => Ok(Behaviour::Backoff),
            _ => Err(format!(
                "unknown behaviour `{s}`: expected ignore, honour or backoff"
            )),
        }
    }
}

/// Behaviours and their shares of the clients, in percent (summing to 100).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mix(pub Vec<(Behaviour, u32)>);

impl FromStr for Mix {
    type Err = String;

    /// `honour` (all clients) or `honour=70%,ignore=30%`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts = Vec::new();
        for part in s.split(',') {
            let (name, share) = match part.split_once('=') {
                Some((name, share)) => {
                    let digits = share.trim().trim_end_matches('%');
                    let share = digits
                        .parse::<u32>()
                        .ok()
                        .filter(|p| (1..=100).contains(p))
                        .ok_or_else(|| {
                            format!("invalid share `{share}`: expected a percentage 1% to 100%")
                        })?;
                    (name, share)
                }
                None => (part, 100),
            };
            let behaviour: Behaviour = name.parse()?;
            if parts.iter().any(|(b, _)| *b == behaviour) {
                return Err(format!("behaviour `{behaviour}` given twice"));
            }
            parts.push((behaviour, share));
        }
        let total: u32 = parts.iter().map(|p| p.1).sum();
        if total != 100 {
            return Err(format!(
                "behaviour shares add up to {total}%, not 100% (e.g. honour=70%,ignore=30%)"
            ));
        }
        Ok(Mix(parts))
    }
}

impl Mix {
    /// Every client ignores 429s.
    pub fn ignore() -> Self {
        Mix(vec![(Behaviour::Ignore, 100)])
    }

    /// The behaviour of each of `clients` clients: each share gets its
    /// rounded part (largest remainders first), in the order given, so the
    /// assignment is the same on every run.
    pub fn assign(&self, clients: u32) -> Vec<Behaviour> {
        let exact: Vec<u64> = self.0.iter().map(|p| p.1 as u64 * clients as u64).collect();
        let mut counts: Vec<u64> = exact.iter().map(|e| e / 100).collect();
        let mut left = clients as u64 - counts.iter().sum::<u64>();
        let mut order: Vec<usize> = (0..counts.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(exact[i] % 100));
        for &i in order.iter().cycle().take(left as usize) {
            counts[i] += 1;
            left -= 1;
        }
        debug_assert_eq!(left, 0);
        self.0
            .iter()
            .zip(counts)
            .flat_map(|((b, _), n)| std::iter::repeat(*b).take(n as usize))
            .collect()
    }
}

/// Exponential backoff with full jitter (tollgate-http's client rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Retries after the first attempt, at most.
    pub max_retries: u32,
    /// The first backoff's upper bound; doubles with each retry.
    pub base: Duration,
    /// The largest backoff bound.
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            max_retries: 4,
            base: Duration::from_millis(100),
            cap: Duration::from_secs(10),
        }
    }
}

/// Everything one load test needs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The URL under test (`http://HOST:PORT/PATH`).
    pub url: String,
    /// The same service without the limiter, run with the same schedule
    /// after the main run, for the limiter's cost.
    pub baseline: Option<String>,
    /// The policy the target enforces per client (for overshoot and `3x`).
    pub policy: Option<Limit>,
    /// Simulated clients, each with its own key.
    pub clients: u32,
    /// Offered load per client.
    pub rate: Rate,
    /// Arrival process.
    pub arrivals: Arrivals,
    /// Stop scheduling after this long.
    pub duration: Option<Duration>,
    /// Stop after this many scheduled arrivals (all clients).
    pub requests: Option<u64>,
    /// Connections at most (each carries one request at a time, kept alive).
    pub connections: usize,
    /// A request not answered within this is an error (and its connection
    /// is closed); also the bound on connecting.
    pub timeout: Duration,
    /// An arrival that no connection could send within this of its time is
    /// dropped and counted, not sent late.
    pub max_lateness: Duration,
    /// The header carrying each client's key.
    pub key_header: String,
    /// The key of client `i`: `{i}` is replaced by its number.
    pub key_pattern: String,
    /// Behaviours and their shares.
    pub mix: Mix,
    /// The backoff behaviour's rules.
    pub backoff: Backoff,
    /// Seed of every random draw (Poisson gaps, jitter).
    pub seed: u64,
    /// Allow a target that is not a loopback address.
    pub allow_remote: bool,
}

impl Config {
    /// A configuration with the defaults the command line uses.
    pub fn new(url: impl Into<String>) -> Self {
        Config {
            url: url.into(),
            baseline: None,
            policy: None,
            clients: 10,
            rate: Rate::PerSecond(10.0),
            arrivals: Arrivals::Constant,
            duration: Some(Duration::from_secs(10)),
            requests: None,
            connections: 64,
            timeout: Duration::from_secs(5),
            max_lateness: Duration::from_millis(50),
            key_header: "x-api-key".into(),
            key_pattern: "client-{i}".into(),
            mix: Mix::ignore(),
            backoff: Backoff::default(),
            seed: 1,
            allow_remote: false,
        }
    }

    /// The key of client `i`.
    pub fn key(&self, i: u32) -> String {
        self.key_pattern.replace("{i}", &i.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        assert_eq!("50".parse(), Ok(Rate::PerSecond(50.0)));
        assert_eq!("2.5/s".parse(), Ok(Rate::PerSecond(2.5)));
        assert_eq!("3x".parse(), Ok(Rate::Multiple(3.0)));
        assert_eq!("MAX".parse(), Ok(Rate::Max));
        for bad in ["", "0", "-1", "x", "inf", "NaNx", "3y"] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
        assert!(Rate::Multiple(3.0).per_second(None).is_err());
    }

    #[test]
    fn mixes_parse_and_assign_every_client() {
        let mix: Mix = "honour=70%,ignore=30%".parse().unwrap();
        let a = mix.assign(10);
        assert_eq!(a.iter().filter(|b| **b == Behaviour::Honour).count(), 7);
        assert_eq!(a.len(), 10);
        // Rounded shares still cover every client.
        let mix: Mix = "honour=33%,ignore=33%,backoff=34%".parse().unwrap();
        for n in [1, 2, 3, 7, 100] {
            assert_eq!(mix.assign(n).len(), n as usize);
        }
        assert_eq!(
            "backoff".parse::<Mix>().unwrap().assign(3),
            [Behaviour::Backoff; 3]
        );
        for bad in [
            "",
            "honour=70%",
            "honour=70%,honour=30%",
            "x=100%",
            "ignore=0%,honour=100%",
        ] {
            assert!(bad.parse::<Mix>().is_err(), "{bad}");
        }
    }

    #[test]
    fn keys_follow_the_pattern() {
        let mut c = Config::new("http://127.0.0.1:1/");
        assert_eq!(c.key(3), "client-3");
        c.key_pattern = "k{i}-{i}".into();
        assert_eq!(c.key(12), "k12-12");
    }
}
