//! The configuration file: envoyproxy/ratelimit descriptor files as they
//! are, tollgate's extensions, and the proxy mode's HTTP rules.
//!
//! ```
//! use tollgate_server::config::Config;
//!
//! let yaml = "
//! domain: api
//! descriptors:
//!   - key: remote_address
//!     rate_limit:
//!       unit: minute
//!       requests_per_unit: 100
//!   - key: plan
//!     value: free
//!     rate_limit:
//!       algorithm: token_bucket
//!       period: 90s
//!       requests_per_unit: 30
//!       burst: 10
//! ";
//! let config = Config::parse("limits.yaml", yaml)?;
//! let lines: Vec<String> = config.describe();
//! assert_eq!(lines[0], "api.remote_address: fixed window: 100 per minute");
//! assert_eq!(lines[1], "api.plan_free: token bucket: 30 per 90 seconds, bursts of 10");
//! # Ok::<(), tollgate_server::config::ConfigError>(())
//! ```
//!
//! The YAML is read by `serde-saphyr`: a maintained, pure-Rust parser
//! (no C library, no `unsafe-libyaml`) that reports the line and column of
//! every error, including errors found after parsing (through its
//! `Spanned` values), which is what a configuration a person edits needs.

mod build;
mod describe;
mod error;
mod raw;
mod source;
mod store;
mod tree;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use tollgate::Policy;
use tollgate_http::{ClientIp, Rule};

use crate::store::MemorySettings;
use crate::top_shape::TopSettings;

pub use describe::{describe_limit, describe_period};
pub use error::ConfigError;
pub use raw::StoreErrorMode;
pub use source::{DirectoryOptions, Source};
pub use store::StoreSettings;
pub(crate) use tree::composite;
pub use tree::Match;
pub(crate) use tree::Node;

/// What a configured descriptor does to the requests it matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// `unlimited: true`: always OK, never counted against anything.
    Unlimited,
    /// `requests_per_unit: 0`: every request is over the limit.
    Block,
    /// The policy's limits, charged atomically.
    Limit(Policy),
}

/// One configured limit: a node of a descriptor tree with a `rate_limit`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitEntry {
    /// `domain.key_value.key2` (the value as written), as in
    /// envoyproxy/ratelimit's statistics.
    pub path: String,
    /// `rate_limit.name`, what other limits' `replaces` refer to.
    pub name: Option<String>,
    /// Names of the limits this one replaces when both match.
    pub replaces: Vec<String>,
    /// What the limit does.
    pub action: Action,
    /// `shadow_mode`: decided and counted, never over the limit.
    pub shadow: bool,
    /// `detailed_metric`: metrics labelled with the request's values.
    pub detailed_metric: bool,
    /// The levels (0 the first) marked `secret: true`: the request's values
    /// there are shown only as their digests (`/v1/top`, `/top`, metrics).
    pub secret: Vec<usize>,
    /// What a store failure does.
    pub on_store_error: StoreErrorMode,
    /// `quota_mode`: over this limit refuses the request only when every
    /// quota of the request is over too (envoyproxy/ratelimit's rule).
    pub quota_mode: bool,
    /// The limit as envoyproxy/ratelimit sees it, when it is one: one fixed
    /// window (or `requests_per_unit: 0` with its unit).
    pub upstream: Option<UpstreamLimit>,
    /// Its place in [`Config::entries`], where a server keeps what it
    /// prepared for it; `None` for a limit sent with a request.
    pub index: Option<usize>,
}

/// A limit in envoyproxy/ratelimit's own form, `requests_per_unit` per one
/// fixed window, with what its counting needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamLimit {
    /// The limit (0 for a limit that refuses everything).
    pub requests_per_unit: u64,
    /// The window, in nanoseconds (a unit: second to year).
    pub period_ns: u64,
    /// A fixed window of one more than the limit over the same period:
    /// charging every hit to it, a count past the limit (refused, with 0
    /// left) is told from a count at it (admitted, 0 left) by one call.
    pub counting: Policy,
}

impl UpstreamLimit {
    /// `requests_per_unit` per `period_ns`; `None` past the quotas tollgate
    /// can hold.
    pub fn new(requests_per_unit: u64, period_ns: u64) -> Option<UpstreamLimit> {
        let room = requests_per_unit.checked_add(1)?;
        let quota = tollgate::Quota::with_parts(room, period_ns, room).ok()?;
        let counting = Policy::new(tollgate::Limit::new(
            tollgate::Algorithm::FixedWindow,
            quota,
        ));
        Some(UpstreamLimit {
            requests_per_unit,
            period_ns,
            counting,
        })
    }
}

/// A loaded, validated configuration. Immutable: a reload builds a new one.
#[derive(Clone, Debug, Default)]
pub struct Config {
    domains: HashMap<String, Node>,
    entries: Vec<Arc<LimitEntry>>,
    http_rules: Vec<Rule>,
    http_descriptions: Vec<String>,
    http_client_ip: ClientIp,
    memory: MemorySettings,
    /// Whether each HTTP rule (same order) falls back to this instance's
    /// share when the store fails.
    http_fallback: Vec<bool>,
    store: StoreSettings,
    top: TopSettings,
}

impl Config {
    /// Parses and validates `text`; `file` names it in errors.
    /// A file that defines nothing (empty, only comments: often a write
    /// still in progress, or one cut short) is refused.
    pub fn parse(file: &str, text: &str) -> Result<Config, ConfigError> {
        let config = build::build(file, text)?;
        if config.domains.is_empty() && config.http_rules.is_empty() {
            return Err(ConfigError::unlocated(
                file,
                "the file defines no domain and no HTTP rule (is it empty, or still being written?)",
            ));
        }
        Ok(config)
    }

    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::unlocated(&file, format!("cannot read the file: {e}")))?;
        Config::parse(&file, &text)
    }

    /// The limit for one request descriptor of `domain` (its `(key, value)`
    /// entries in order), by envoyproxy/ratelimit's rules: at each level an
    /// exact `key`+`value` first, then a `value` ending in `*` by prefix,
    /// then a `key` without value (any value, each its own counter); the
    /// limit applies only if every entry was matched.
    pub fn lookup(&self, domain: &str, entries: &[(String, String)]) -> Option<Match<'_>> {
        self.domains.get(domain)?.lookup(entries)
    }

    /// Whether `domain` is configured (envoyproxy/ratelimit honours a
    /// request's own limit only in a known domain).
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// Every configured limit, in file order.
    pub fn entries(&self) -> &[Arc<LimitEntry>] {
        &self.entries
    }

    /// The HTTP rules of the proxy mode, in file order.
    pub fn http_rules(&self) -> &[Rule] {
        &self.http_rules
    }

    /// Whether nothing is limited: no descriptor with a `rate_limit` and no
    /// HTTP rule.
    pub fn limits_nothing(&self) -> bool {
        self.entries.is_empty() && self.http_rules.is_empty()
    }

    /// How many domains are defined.
    pub fn domain_count(&self) -> usize {
        self.domains.len()
    }

    /// Checks every policy against a store (`validate` is its
    /// [`tollgate::Backend::prepare`]), so that a limit the store cannot
    /// decide is refused when the configuration is loaded, not at its first
    /// request; the error names the limit.
    pub fn check_store<E: std::fmt::Display>(
        &self,
        validate: impl Fn(&Policy) -> Result<(), E>,
    ) -> Result<(), String> {
        let limits = self.entries.iter().filter_map(|e| match &e.action {
            Action::Limit(policy) => Some((format!("limit `{}`", e.path), policy)),
            _ => None,
        });
        let rules = self
            .http_rules
            .iter()
            .map(|r| (format!("HTTP rule `{}`", r.name()), r.policy()));
        for (what, policy) in limits.chain(rules) {
            validate(policy).map_err(|e| format!("{what}: the store cannot enforce it: {e}"))?;
        }
        Ok(())
    }

    /// How the proxy finds the client's address (`http.client_ip`: the
    /// socket peer unless trusted proxies are listed).
    pub fn http_client_ip(&self) -> &ClientIp {
        &self.http_client_ip
    }

    /// The `memory` section: the memory store's bounds, read at start.
    pub fn memory(&self) -> MemorySettings {
        self.memory
    }

    /// Whether the HTTP rule at `index` of [`Config::http_rules`] has
    /// `on_store_error: fallback` (the server gives it its fallback).
    pub fn http_rule_falls_back(&self, index: usize) -> bool {
        self.http_fallback.get(index).copied().unwrap_or(false)
    }

    /// The `top` section: the heavy-hitter summaries' shape, read at start.
    pub fn top(&self) -> TopSettings {
        self.top
    }

    /// The `store` section.
    pub fn store(&self) -> &StoreSettings {
        &self.store
    }

    /// One line per configured limit and HTTP rule, in words.
    pub fn describe(&self) -> Vec<String> {
        let limits = self.entries.iter().map(|e| describe::describe_entry(e));
        limits
            .chain(self.http_descriptions.iter().cloned())
            .collect()
    }
}
