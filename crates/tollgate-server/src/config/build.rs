//! From the file as written ([`super::raw`]) to a validated [`Config`]:
//! every error found here points at the node it is about.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_saphyr::{Location, Spanned};
use tollgate::{Algorithm, Limit, Policy, Quota};
use tollgate_http::{Key, OnStoreError as HttpStoreError, Rule};

use super::raw::{self, QuotaSpec, StoreErrorMode};
use super::{describe, tree, Action, Config, ConfigError, LimitEntry, Node, UpstreamLimit};
use crate::store::MemorySettings;
use crate::top_shape::TopSettings;

const NS_PER_SEC: u64 = 1_000_000_000;

/// envoyproxy/ratelimit's units (any case); a month is 30 days and a year
/// 365, as there.
const UNITS: [(&str, u64); 7] = [
    ("second", NS_PER_SEC),
    ("minute", 60 * NS_PER_SEC),
    ("hour", 3_600 * NS_PER_SEC),
    ("day", 86_400 * NS_PER_SEC),
    ("week", 7 * 86_400 * NS_PER_SEC),
    ("month", 30 * 86_400 * NS_PER_SEC),
    ("year", 365 * 86_400 * NS_PER_SEC),
];

pub(super) fn build(file: &str, text: &str) -> Result<Config, ConfigError> {
    let raw: raw::File =
        serde_saphyr::from_str(text).map_err(|e| ConfigError::from_yaml(file, &e))?;
    let mut b = Builder {
        file,
        config: Config::default(),
        names: HashMap::new(),
        replaces: Vec::new(),
    };
    let mut domains = raw.domains;
    if let Some(domain) = raw.domain {
        domains.insert(
            0,
            raw::Domain {
                domain,
                descriptors: raw.descriptors,
            },
        );
    } else if let Some(first) = raw.descriptors.first() {
        return Err(b.error(first.key.referenced, "`descriptors` without a `domain`"));
    }
    for domain in domains {
        b.domain(domain)?;
    }
    b.check_replaces()?;
    b.memory(raw.memory.unwrap_or_default())?;
    b.top(raw.top.unwrap_or_default())?;
    let http = raw.http.unwrap_or_default();
    b.config.http_client_ip = http.client_ip;
    for rule in http.rules {
        b.http_rule(rule)?;
    }
    if let Some(section) = raw.store {
        b.config.store = super::store::build(file, section)?;
    }
    Ok(b.config)
}

struct Builder<'f> {
    file: &'f str,
    config: Config,
    /// Limit names seen, for `replaces`.
    names: HashMap<String, Location>,
    /// Every `replaces` name with where it was written.
    replaces: Vec<(String, Location)>,
}

impl Builder<'_> {
    fn error(&self, at: Location, message: impl Into<String>) -> ConfigError {
        ConfigError::at(self.file, at, message)
    }

    fn memory(&mut self, memory: raw::Memory) -> Result<(), ConfigError> {
        if let Some(max) = &memory.max_keys {
            if max.value == 0 {
                return Err(self.error(max.referenced, "`max_keys` must be at least 1"));
            }
        }
        let sweep_every = match memory.sweep_every {
            Some(every) => Some(Duration::from_nanos(
                parse_period(&every.value).map_err(|m| self.error(every.referenced, m))?,
            )),
            None => None,
        };
        self.config.memory = MemorySettings {
            max_keys: memory.max_keys.map(|m| m.value),
            sweep_every,
        };
        Ok(())
    }

    fn top(&mut self, top: raw::Top) -> Result<(), ConfigError> {
        let sub_window = match &top.sub_window {
            Some(every) => Some(Duration::from_nanos(
                parse_period(&every.value).map_err(|m| self.error(every.referenced, m))?,
            )),
            None => None,
        };
        let settings = TopSettings {
            keys: top.keys.as_ref().map(|k| k.value),
            sub_window,
            sub_windows: top.sub_windows.as_ref().map(|n| n.value),
        };
        if let Err(error) = settings.shape() {
            let at = match error.setting {
                "sub_window" => top.sub_window.map(|s| s.referenced),
                "sub_windows" => top.sub_windows.map(|s| s.referenced),
                _ => top.keys.map(|s| s.referenced),
            };
            let message = format!("`top`: {error}");
            return Err(match at {
                Some(at) => self.error(at, message),
                None => ConfigError::unlocated(self.file, message),
            });
        }
        self.config.top = settings;
        Ok(())
    }

    fn domain(&mut self, domain: raw::Domain) -> Result<(), ConfigError> {
        let name = domain.domain.value.clone();
        if name.is_empty() {
            return Err(self.error(domain.domain.referenced, "the domain is empty"));
        }
        if self.config.domains.contains_key(&name) {
            return Err(self.error(
                domain.domain.referenced,
                format!("domain `{name}` is defined twice"),
            ));
        }
        let mut root = Node::default();
        for d in domain.descriptors {
            self.descriptor(&mut root, &name, &[], d)?;
        }
        self.config.domains.insert(name, root);
        Ok(())
    }

    fn descriptor(
        &mut self,
        parent: &mut Node,
        parent_path: &str,
        parent_secret: &[bool],
        d: raw::Descriptor,
    ) -> Result<(), ConfigError> {
        let at = d.key.referenced;
        let key = d.key.value;
        if key.is_empty() {
            return Err(self.error(at, "the descriptor's key is empty"));
        }
        let composite = tree::composite(&key, d.value.as_deref());
        let path = format!("{parent_path}.{composite}");
        let wildcard = composite.ends_with('*');
        if d.share_threshold && !wildcard {
            return Err(self.error(
                at,
                format!("`share_threshold` needs a value ending in `*` (envoyproxy/ratelimit's wildcard), found `{composite}`"),
            ));
        }
        let secret = [parent_secret, &[d.secret]].concat();
        let mut node = Node {
            share_threshold: d.share_threshold,
            ..Node::default()
        };
        if let Some(rate_limit) = d.rate_limit {
            let entry = self.entry(&path, rate_limit, d.shadow_mode, d.detailed_metric)?;
            let entry = Arc::new(LimitEntry {
                on_store_error: d.on_store_error.unwrap_or_default(),
                quota_mode: d.quota_mode,
                index: Some(self.config.entries.len()),
                secret: (0..secret.len()).filter(|&i| secret[i]).collect(),
                ..entry
            });
            self.config.entries.push(Arc::clone(&entry));
            node.limit = Some(entry);
        }
        for child in d.descriptors {
            self.descriptor(&mut node, &path, &secret, child)?;
        }
        if parent.children.contains_key(&composite) {
            return Err(self.error(
                at,
                format!(
                    "duplicate descriptor `{path}`: the same key and value twice at this level"
                ),
            ));
        }
        if wildcard {
            parent.wildcards.push(composite.clone());
        }
        parent.children.insert(composite, node);
        Ok(())
    }

    fn entry(
        &mut self,
        path: &str,
        rate_limit: Spanned<raw::RateLimit>,
        shadow: bool,
        detailed_metric: bool,
    ) -> Result<LimitEntry, ConfigError> {
        let at = rate_limit.referenced;
        let rl = rate_limit.value;
        if let Some(name) = &rl.name {
            if let Some(first) = self.names.insert(name.clone(), at) {
                return Err(self.error(
                    at,
                    format!(
                        "limit name `{name}` is already used at line {}",
                        first.line()
                    ),
                ));
            }
        }
        self.replaces
            .extend(rl.replaces.iter().map(|r| (r.name.clone(), at)));
        let action = if rl.unlimited {
            if rl.has_inline() || !rl.limits.is_empty() {
                return Err(self.error(at, "`unlimited: true` takes no quota"));
            }
            Action::Unlimited
        } else if !rl.limits.is_empty() {
            if rl.has_inline() {
                return Err(self.error(
                    at,
                    "give either one inline quota or a `limits` list, not both",
                ));
            }
            let limits = rl
                .limits
                .iter()
                .map(|spec| self.limit(&spec.value, spec.referenced))
                .collect::<Result<Vec<_>, _>>()?;
            Action::Limit(Policy::with_limits(limits).expect("limits is not empty"))
        } else if rl.requests_per_unit == Some(0) {
            Action::Block
        } else {
            Action::Limit(Policy::new(self.limit(&rl.inline(), at)?))
        };
        let upstream = match &action {
            Action::Block => match (&rl.unit, &rl.period) {
                (None, None) => None,
                _ => UpstreamLimit::new(0, self.period(&rl.inline(), at)?),
            },
            // Only envoyproxy/ratelimit's own form (`unit` and
            // `requests_per_unit`, nothing of tollgate's) is counted its way.
            Action::Limit(_) if rl.algorithm.is_some() || rl.period.is_some() => None,
            Action::Limit(_) if !rl.limits.is_empty() => None,
            Action::Limit(policy) => match policy.limits() {
                [one] if one.algorithm == Algorithm::FixedWindow => {
                    UpstreamLimit::new(one.quota.limit(), one.quota.period_ns())
                }
                _ => None,
            },
            Action::Unlimited => None,
        };
        Ok(LimitEntry {
            path: path.to_string(),
            name: rl.name,
            replaces: rl.replaces.into_iter().map(|r| r.name).collect(),
            action,
            shadow,
            detailed_metric,
            on_store_error: StoreErrorMode::Open,
            quota_mode: false,
            secret: Vec::new(),
            upstream,
            index: None,
        })
    }

    /// The window a spec names, by `unit` or `period`.
    fn period(&self, spec: &QuotaSpec, at: Location) -> Result<u64, ConfigError> {
        Ok(match (&spec.unit, &spec.period) {
            (Some(_), Some(_)) => {
                return Err(self.error(at, "give either `unit` or `period`, not both"))
            }
            (None, None) => {
                return Err(self.error(at, "missing `unit` (second, minute, ...) or `period` (e.g. 90s)"))
            }
            (Some(unit), None) => UNITS
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(unit))
                .map(|&(_, ns)| ns)
                .ok_or_else(|| {
                    self.error(
                        at,
                        format!("unknown unit `{unit}`; expected second, minute, hour, day, week, month or year"),
                    )
                })?,
            (None, Some(period)) => parse_period(period).map_err(|m| self.error(at, m))?,
        })
    }

    fn limit(&self, spec: &QuotaSpec, at: Location) -> Result<Limit, ConfigError> {
        let period = self.period(spec, at)?;
        let Some(limit) = spec.requests_per_unit else {
            return Err(self.error(at, "missing `requests_per_unit`"));
        };
        let algorithm = match &spec.algorithm {
            Some(name) => name
                .parse::<Algorithm>()
                .map_err(|e| self.error(at, e.to_string()))?,
            None => Algorithm::FixedWindow,
        };
        if spec.burst.is_some() && !algorithm.uses_burst() {
            return Err(self.error(
                at,
                format!("`burst` does not apply to {algorithm}; it applies to token_bucket, gcra, leaky_bucket and leaky_queue"),
            ));
        }
        if spec.burst == Some(0) {
            return Err(self.error(at, "`burst` must be at least 1"));
        }
        let quota = Quota::with_parts(limit, period, spec.burst.unwrap_or(limit))
            .map_err(|e| self.error(at, format!("impossible quota: {e}")))?;
        Ok(Limit::new(algorithm, quota))
    }

    fn check_replaces(&self) -> Result<(), ConfigError> {
        match self
            .replaces
            .iter()
            .find(|(name, _)| !self.names.contains_key(name))
        {
            Some((name, at)) => Err(self.error(
                *at,
                format!("`replaces` names `{name}`, which no rate_limit is called"),
            )),
            None => Ok(()),
        }
    }

    fn http_rule(&mut self, rule: Spanned<raw::HttpRule>) -> Result<(), ConfigError> {
        let at = rule.referenced;
        let r = rule.value;
        // The name is written in the RateLimit-Policy field of answers: the
        // layer refuses what could not be, so must the file.
        if !tollgate_http::fields::valid_name(&r.name) {
            return Err(self.error(
                at,
                format!(
                    "HTTP rule name `{}` must be non-empty printable ASCII",
                    r.name.escape_debug()
                ),
            ));
        }
        if self.config.http_rules.iter().any(|x| x.name() == r.name) {
            return Err(self.error(at, format!("HTTP rule `{}` is defined twice", r.name)));
        }
        let specs: Vec<(&QuotaSpec, Location)> = match (&r.limit, r.limits.is_empty()) {
            (Some(one), true) => vec![(&one.value, one.referenced)],
            (None, false) => r.limits.iter().map(|s| (&s.value, s.referenced)).collect(),
            _ => {
                return Err(self.error(at, "an HTTP rule needs either `limit` or `limits`"));
            }
        };
        let limits = specs
            .into_iter()
            .map(|(spec, at)| self.limit(spec, at))
            .collect::<Result<Vec<_>, _>>()?;
        let policy = Policy::with_limits(limits).expect("at least one limit");
        let key_words = r.key.as_ref().unwrap_or(&Key::ip()).describe();
        let mode = r.mode;
        let mut out = Rule::new(r.name.clone(), policy)
            .matcher(r.matcher)
            .mode(r.mode)
            .on_missing_key(r.on_missing_key)
            .on_store_error(match r.on_store_error {
                StoreErrorMode::Open => HttpStoreError::Open,
                // Closed until the server gives the rule its fallback
                // (`Engine::http_rules`).
                StoreErrorMode::Closed | StoreErrorMode::Fallback => HttpStoreError::Closed,
            });
        self.config
            .http_fallback
            .push(r.on_store_error == StoreErrorMode::Fallback);
        if let Some(key) = r.key {
            out = out.key(key);
        }
        if let Some(cost) = r.cost {
            out = out.cost(cost);
        }
        if let Some(min) = r.min_cost {
            if min.value == 0 {
                return Err(self.error(min.referenced, "`min_cost` must be at least 1"));
            }
            out = out.min_cost(min.value);
        }
        if let Some(client_ip) = r.client_ip {
            out = out.client_ip(client_ip);
        }
        self.config
            .http_descriptions
            .push(describe::describe_rule(&out, mode, &key_words));
        self.config.http_rules.push(out);
        Ok(())
    }
}

/// `90s`, `1m30s`, `250ms`: a positive duration, exact in nanoseconds.
fn parse_period(text: &str) -> Result<u64, String> {
    let d = humantime::parse_duration(text)
        .map_err(|e| format!("invalid period `{text}`: {e} (e.g. 90s, 1m30s, 250ms)"))?;
    u64::try_from(d.as_nanos())
        .ok()
        .filter(|&ns| ns > 0)
        .ok_or_else(|| format!("invalid period `{text}`: must be above 0 and at most 584 years"))
}
