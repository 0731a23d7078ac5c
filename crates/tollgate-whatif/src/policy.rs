//! Candidate policies: from the server's configuration file (the very rules
//! `tollgate serve` would enforce), or a sweep of one algorithm's limit and
//! burst.
//!
//! Each candidate is decided on its own, as if it were the only rule: the
//! question is whom *this* rule would refuse.

use std::fmt;
use std::path::Path;

use tollgate_core::{Algorithm, Limit, Quota};
use tollgate_http::{Cost, Key, MissingKey, Rule};
use tollgate_server::config::{describe_limit, Action, Config};

/// Where requests get their key and cost, and which requests count: a rule
/// of the HTTP layer, or every request under one key.
#[derive(Clone, Debug)]
pub struct Lane {
    /// For the report: the rule's name or the key.
    pub name: String,
    /// The HTTP rule whose matcher selects requests; `None` selects all.
    pub rule: Option<Rule>,
    /// Whose budget a request spends.
    pub key: Key,
    /// What it costs.
    pub cost: Cost,
    /// Whether a request without the key is refused (counted as such) or
    /// passes the rule by.
    pub missing: MissingKey,
}

impl Lane {
    /// Every request, keyed by `key`, cost 1, refused without the key.
    pub fn every_request(key: Key) -> Self {
        Lane {
            name: key.describe(),
            rule: None,
            key,
            cost: Cost::default(),
            missing: MissingKey::Refuse,
        }
    }
}

/// One policy to decide the log with.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// In words, unique among the candidates.
    pub name: String,
    /// The index of its [`Lane`].
    pub lane: usize,
    /// Its limits, all applied (charged atomically).
    pub limits: Vec<Limit>,
    /// For a sweep: the limit and burst varied.
    pub point: Option<SweepPoint>,
}

/// A candidate's place in a sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SweepPoint {
    /// Cost units per period.
    pub limit: u64,
    /// The burst; `None` for the windows, which have none.
    pub burst: Option<u64>,
}

/// The lanes and candidates of a run.
#[derive(Clone, Debug, Default)]
pub struct Candidates {
    /// Lanes, referred to by index.
    pub lanes: Vec<Lane>,
    /// The policies.
    pub policies: Vec<Candidate>,
}

/// A policy that cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError(pub String);

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PolicyError {}

impl Candidates {
    /// The limits of a configuration file: each HTTP rule with its own
    /// matcher, key and cost; each descriptor limit over every request,
    /// keyed by `key` (a log does not carry Envoy's descriptors).
    pub fn from_config(config: &Config, key: &Key) -> Result<Self, PolicyError> {
        let mut c = Candidates::default();
        for rule in config.http_rules() {
            c.lanes.push(Lane {
                name: format!("rule `{}`", rule.name()),
                rule: Some(rule.clone()),
                key: rule.key_spec().clone(),
                cost: rule.cost_spec().clone(),
                missing: rule.missing_key(),
            });
            c.policies.push(Candidate {
                name: format!("{}: {}", rule.name(), words(rule.policy().limits())),
                lane: c.lanes.len() - 1,
                limits: rule.policy().limits().to_vec(),
                point: None,
            });
        }
        let mut descriptor_lane = None;
        for entry in config.entries() {
            let Action::Limit(policy) = &entry.action else {
                continue;
            };
            let lane = *descriptor_lane.get_or_insert_with(|| {
                c.lanes.push(Lane::every_request(key.clone()));
                c.lanes.len() - 1
            });
            c.policies.push(Candidate {
                name: format!("{}: {}", entry.path, words(policy.limits())),
                lane,
                limits: policy.limits().to_vec(),
                point: None,
            });
        }
        if c.policies.is_empty() {
            return Err(PolicyError("the configuration has no limit to try (no http rule, no descriptor with a rate_limit)".into()));
        }
        Ok(c)
    }

    /// [`from_config`](Candidates::from_config) on the file at `path`.
    pub fn load(path: &Path, key: &Key) -> Result<Self, PolicyError> {
        let config = Config::load(path).map_err(|e| PolicyError(e.to_string()))?;
        Candidates::from_config(&config, key)
    }

    /// Every combination of `limits` and `bursts` (each burst defaulting to
    /// the limit when `bursts` is empty) of one algorithm and period, keyed
    /// by `key`.
    pub fn sweep(
        algorithm: Algorithm,
        period_ns: u64,
        limits: &[u64],
        bursts: &[u64],
        key: Key,
    ) -> Result<Self, PolicyError> {
        let mut c = Candidates {
            lanes: vec![Lane::every_request(key)],
            policies: Vec::new(),
        };
        let bursts: Vec<Option<u64>> = if bursts.is_empty() {
            vec![None]
        } else {
            bursts.iter().copied().map(Some).collect()
        };
        for burst in bursts {
            for &limit in limits {
                let burst = burst.unwrap_or(limit);
                if algorithm.uses_burst() && algorithm != Algorithm::LeakyQueue && burst == 0 {
                    return Err(PolicyError(format!("burst 0 has no meaning for {algorithm}: a bucket of capacity 0 admits nothing")));
                }
                let quota = Quota::with_parts(limit, period_ns, burst)
                    .map_err(|e| PolicyError(format!("limit {limit}, burst {burst}: {e}")))?;
                let rule = Limit::new(algorithm, quota);
                // `bursts of N` is said whenever the burst is not the limit.
                let name = describe_limit(&rule);
                if c.policies.iter().any(|p| p.name == name) {
                    continue;
                }
                c.policies.push(Candidate {
                    name,
                    lane: 0,
                    limits: vec![rule],
                    point: Some(SweepPoint {
                        limit,
                        burst: algorithm.uses_burst().then_some(burst),
                    }),
                });
            }
        }
        if c.policies.is_empty() {
            return Err(PolicyError("the sweep names no limit".into()));
        }
        Ok(c)
    }
}

fn words(limits: &[Limit]) -> String {
    limits
        .iter()
        .map(describe_limit)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Reads a sweep of the limit: `limit=50..500` (10 values, both ends
/// included), `limit=50..500/20` (20 values), `limit=50..500:25` (every
/// 25), or `limit=50,100,200`.
///
/// ```
/// use tollgate_whatif::policy::parse_sweep;
///
/// assert_eq!(parse_sweep("limit=50..500").unwrap(), [50, 100, 150, 200, 250, 300, 350, 400, 450, 500]);
/// assert_eq!(parse_sweep("limit=10..20:5").unwrap(), [10, 15, 20]);
/// assert_eq!(parse_sweep("limit=7,3,7").unwrap(), [3, 7]);
/// ```
pub fn parse_sweep(spec: &str) -> Result<Vec<u64>, PolicyError> {
    let bad = |why: &str| PolicyError(format!("sweep `{}`: {why}", spec.escape_debug()));
    let number = |t: &str| {
        t.trim()
            .parse::<u64>()
            .map_err(|_| bad("expected whole numbers"))
    };
    let values = spec.strip_prefix("limit=").ok_or_else(|| {
        bad("expected limit=FROM..TO, limit=FROM..TO/COUNT, limit=FROM..TO:STEP or limit=A,B,C")
    })?;
    let mut out: Vec<u64> = if let Some((from, rest)) = values.split_once("..") {
        let (to, count, step) = if let Some((to, n)) = rest.split_once('/') {
            (number(to)?, Some(number(n)?), None)
        } else if let Some((to, s)) = rest.split_once(':') {
            (number(to)?, None, Some(number(s)?))
        } else {
            (number(rest)?, Some(10), None)
        };
        let from = number(from)?;
        if from > to {
            return Err(bad("FROM is above TO"));
        }
        match (count, step) {
            (Some(0), _) | (_, Some(0)) => return Err(bad("the count or step must be at least 1")),
            (Some(1), _) => vec![from],
            (Some(n), _) if n > 1000 => return Err(bad("at most 1000 values")),
            (Some(n), _) => (0..n)
                .map(|i| from + ((to - from) as u128 * i as u128 / (n - 1) as u128) as u64)
                .collect(),
            (None, Some(s)) => {
                if (to - from) / s >= 1000 {
                    return Err(bad("at most 1000 values"));
                }
                (0..)
                    .map(|i| from + i * s)
                    .take_while(|v| *v <= to)
                    .collect()
            }
            (None, None) => unreachable!("a count or a step is always set"),
        }
    } else {
        values.split(',').map(number).collect::<Result<_, _>>()?
    };
    out.sort_unstable();
    out.dedup();
    if out.contains(&0) {
        return Err(bad("a limit of 0 admits nothing"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps() {
        assert_eq!(parse_sweep("limit=1..3/3").unwrap(), [1, 2, 3]);
        assert_eq!(parse_sweep("limit=5..5").unwrap(), [5]);
        for bad in [
            "limit=",
            "rate=1..2",
            "limit=3..1",
            "limit=0..5",
            "limit=1..5/0",
            "limit=1..5:0",
            "limit=a",
            "limit=1..10000000:1",
        ] {
            assert!(parse_sweep(bad).is_err(), "{bad}");
        }
        let c = Candidates::sweep(
            Algorithm::Gcra,
            60_000_000_000,
            &[50, 100],
            &[10, 20],
            Key::ip(),
        )
        .unwrap();
        assert_eq!(c.policies.len(), 4);
        assert_eq!(
            c.policies[1].point,
            Some(SweepPoint {
                limit: 100,
                burst: Some(10)
            })
        );
        assert!(Candidates::sweep(Algorithm::Gcra, 1, &[5], &[0], Key::ip()).is_err());
        // Bursts mean nothing to windows: one policy per limit.
        let w = Candidates::sweep(Algorithm::FixedWindow, 1_000, &[5], &[1, 2], Key::ip()).unwrap();
        assert_eq!(w.policies.len(), 1);
    }

    #[test]
    fn config_rules_and_descriptors() {
        let yaml = "
domain: api
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: open
    rate_limit: { unlimited: true }
http:
  rules:
    - name: per-key
      match: { path_prefix: /v1 }
      key: { header: { name: x-api-key } }
      limit: { algorithm: gcra, unit: second, requests_per_unit: 5, burst: 10 }
";
        let config = Config::parse("t.yaml", yaml).unwrap();
        let c = Candidates::from_config(&config, &Key::ip()).unwrap();
        assert_eq!(c.lanes.len(), 2);
        assert_eq!(c.policies.len(), 2);
        assert!(
            c.policies[0]
                .name
                .starts_with("per-key: GCRA: 5 per second"),
            "{}",
            c.policies[0].name
        );
        assert_eq!(
            c.policies[1].name,
            "api.remote_address: fixed window: 100 per minute"
        );
        assert_eq!(c.lanes[1].key, Key::ip());
    }
}
