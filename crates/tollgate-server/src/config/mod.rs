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
mod store;
mod tree;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use tollgate::Policy;
use tollgate_http::Rule;

pub use describe::{describe_limit, describe_period};
pub use error::ConfigError;
pub use raw::StoreErrorMode;
pub use store::StoreSettings;
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
    /// What a store failure does.
    pub on_store_error: StoreErrorMode,
}

/// A loaded, validated configuration. Immutable: a reload builds a new one.
#[derive(Clone, Debug, Default)]
pub struct Config {
    domains: HashMap<String, Node>,
    entries: Vec<Arc<LimitEntry>>,
    http_rules: Vec<Rule>,
    http_descriptions: Vec<String>,
    /// Whether each HTTP rule (same order) falls back to this instance's
    /// share when the store fails.
    http_fallback: Vec<bool>,
    store: StoreSettings,
}

impl Config {
    /// Parses and validates `text`; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Config, ConfigError> {
        build::build(file, text)
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
    pub fn lookup(&self, domain: &str, entries: &[(String, String)]) -> Option<&Arc<LimitEntry>> {
        self.domains.get(domain)?.lookup(entries)
    }

    /// Every configured limit, in file order.
    pub fn entries(&self) -> &[Arc<LimitEntry>] {
        &self.entries
    }

    /// The HTTP rules of the proxy mode, in file order.
    pub fn http_rules(&self) -> &[Rule] {
        &self.http_rules
    }

    /// Whether the HTTP rule at `index` of [`Config::http_rules`] has
    /// `on_store_error: fallback` (the server gives it its fallback).
    pub fn http_rule_falls_back(&self, index: usize) -> bool {
        self.http_fallback.get(index).copied().unwrap_or(false)
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
