//! The decision shared by the gRPC and HTTP APIs: envoyproxy/ratelimit's
//! semantics over any tollgate [`Backend`].
//!
//! ```
//! use tollgate::MemoryBackend;
//! use tollgate_server::config::Config;
//! use tollgate_server::engine::{CheckRequest, Code, DescriptorRequest, Engine};
//!
//! let yaml = "domain: api\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n";
//! let engine = Engine::new(Config::parse("limits.yaml", yaml)?, MemoryBackend::new());
//! let request = CheckRequest {
//!     domain: "api".into(),
//!     descriptors: vec![DescriptorRequest::new([("user", "ada")])],
//!     hits: 1,
//! };
//! let rt = tokio::runtime::Builder::new_current_thread().build()?;
//! assert_eq!(rt.block_on(engine.check(&request))?.overall, Code::Ok);
//! assert_eq!(rt.block_on(engine.check(&request))?.overall, Code::OverLimit);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashSet;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tollgate::{Backend, BackendError, Decision, Limit};
use tollgate_http::{OnStoreError as HttpOnStoreError, Rule};

use crate::config::{Action, Config, LimitEntry, StoreErrorMode};
use crate::metrics;
use crate::store::{Fallback, RuleFallback};

/// One descriptor of a request: its entries and, optionally, its own hits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DescriptorRequest {
    /// `(key, value)` entries, in order.
    pub entries: Vec<(String, String)>,
    /// This descriptor's hits, overriding the request's (0 only asks).
    pub hits: Option<u64>,
    /// Give the hits back instead of spending them.
    pub negative: bool,
}

impl DescriptorRequest {
    /// A descriptor of `entries`, with the request's hits.
    pub fn new<K: Into<String>, V: Into<String>>(
        entries: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        DescriptorRequest {
            entries: entries
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            ..DescriptorRequest::default()
        }
    }
}

/// A check: a domain, its descriptors and the hits each spends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckRequest {
    /// The configuration domain.
    pub domain: String,
    /// Each is decided on its own.
    pub descriptors: Vec<DescriptorRequest>,
    /// Hits per descriptor; 0 counts as 1, as in Envoy's API.
    pub hits: u64,
}

/// A verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// Under the limit (or not limited).
    Ok,
    /// Over the limit.
    OverLimit,
}

/// The limit a descriptor was decided by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppliedLimit {
    /// The limit's `name`, or its path in the configuration.
    pub name: String,
    /// The limit that decided (the tightest of a policy's); `None` for a
    /// `requests_per_unit: 0` limit.
    pub limit: Option<Limit>,
}

/// The verdict on one descriptor, with its numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescriptorStatus {
    /// Under or over.
    pub code: Code,
    /// The limit applied; `None` when no limit matched, the limit is
    /// `unlimited`, was replaced, or the store failed open.
    pub limit: Option<AppliedLimit>,
    /// Units left; `None` for unlimited.
    pub remaining: Option<u64>,
    /// Nanoseconds until the key is back to full.
    pub reset_after_ns: u64,
    /// Nanoseconds until a retry can pass (over limit only).
    pub retry_after_ns: Option<u64>,
}

impl DescriptorStatus {
    fn unlimited_ok(remaining: Option<u64>) -> Self {
        DescriptorStatus {
            code: Code::Ok,
            limit: None,
            remaining,
            reset_after_ns: 0,
            retry_after_ns: None,
        }
    }
}

/// The verdict on a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckResponse {
    /// Over if any descriptor is over.
    pub overall: Code,
    /// One per descriptor, in the request's order.
    pub statuses: Vec<DescriptorStatus>,
}

/// Why a check got no verdict.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// Envoy's API requires a domain.
    #[error("the domain is empty")]
    EmptyDomain,
    /// Envoy's API requires at least one descriptor.
    #[error("the descriptor list is empty")]
    NoDescriptors,
    /// A descriptor has no entries.
    #[error("descriptor {0} has no entries")]
    EmptyDescriptor(usize),
    /// A limit configured to fail closed could not reach its store.
    #[error("the store failed for `{path}`: {source}")]
    Store {
        /// The limit's path.
        path: String,
        /// The store's error.
        source: BackendError,
    },
}

/// The decision engine: the current configuration (swapped whole on
/// reload) over one store.
pub struct Engine<B> {
    config: ArcSwap<Config>,
    backend: B,
    /// Decides `on_store_error: fallback` limits when the store fails;
    /// without it they fail closed.
    fallback: Option<Arc<dyn Fallback>>,
}

impl<B: Backend> Engine<B> {
    /// An engine deciding `config` in `backend`.
    pub fn new(config: Config, backend: B) -> Self {
        Engine {
            config: ArcSwap::from_pointee(config),
            backend,
            fallback: None,
        }
    }

    /// The same, answering `on_store_error: fallback` from `fallback`.
    pub fn with_fallback(mut self, fallback: Arc<dyn Fallback>) -> Self {
        self.fallback = Some(fallback);
        self
    }

    /// The HTTP rules of `config`, each `on_store_error: fallback` rule
    /// given this engine's fallback (without one, it fails closed).
    pub fn http_rules(&self, config: &Config) -> Vec<Rule> {
        let rules = config.http_rules().iter().enumerate();
        rules
            .map(|(i, rule)| match &self.fallback {
                Some(fallback) if config.http_rule_falls_back(i) => {
                    rule.clone()
                        .on_store_error(HttpOnStoreError::With(Arc::new(RuleFallback {
                            fallback: Arc::clone(fallback),
                            policy: rule.policy().clone(),
                        })))
                }
                _ => rule.clone(),
            })
            .collect()
    }

    /// The configuration in force now.
    pub fn config(&self) -> Arc<Config> {
        self.config.load_full()
    }

    /// Puts `config` in force for the requests that start from now on;
    /// those in flight finish under the one they started with.
    pub fn replace_config(&self, config: Config) {
        if config.store() != self.config.load().store() {
            tracing::warn!("the `store` section changed: it applies from the next start, the running store keeps its settings");
        }
        self.config.store(Arc::new(config));
    }

    /// The store.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Decides `request`: each descriptor on its own, as envoyproxy/ratelimit.
    pub async fn check(&self, request: &CheckRequest) -> Result<CheckResponse, CheckError> {
        if request.domain.is_empty() {
            return Err(CheckError::EmptyDomain);
        }
        if request.descriptors.is_empty() {
            return Err(CheckError::NoDescriptors);
        }
        if let Some(i) = request
            .descriptors
            .iter()
            .position(|d| d.entries.is_empty())
        {
            return Err(CheckError::EmptyDescriptor(i));
        }
        // Held to the end, so a reload never changes a request midway.
        let config = self.config.load_full();
        let matched: Vec<Option<&Arc<LimitEntry>>> = request
            .descriptors
            .iter()
            .map(|d| config.lookup(&request.domain, &d.entries))
            .collect();
        let replaced: HashSet<&str> = matched
            .iter()
            .flatten()
            .flat_map(|e| e.replaces.iter().map(String::as_str))
            .collect();
        let mut statuses = Vec::with_capacity(matched.len());
        for (descriptor, entry) in request.descriptors.iter().zip(matched) {
            let entry = entry.filter(|e| !e.name.as_deref().is_some_and(|n| replaced.contains(n)));
            let status = match entry {
                None => DescriptorStatus::unlimited_ok(Some(0)),
                Some(entry) => {
                    self.decide(&request.domain, request.hits, descriptor, entry)
                        .await?
                }
            };
            statuses.push(status);
        }
        let overall = if statuses.iter().any(|s| s.code == Code::OverLimit) {
            Code::OverLimit
        } else {
            Code::Ok
        };
        Ok(CheckResponse { overall, statuses })
    }

    async fn decide(
        &self,
        domain: &str,
        request_hits: u64,
        descriptor: &DescriptorRequest,
        entry: &LimitEntry,
    ) -> Result<DescriptorStatus, CheckError> {
        let label = metrics::Label::new(entry, &descriptor.entries);
        let hits = descriptor.hits.unwrap_or(request_hits.max(1));
        let policy = match &entry.action {
            Action::Unlimited => return Ok(DescriptorStatus::unlimited_ok(None)),
            Action::Block => {
                label.decided(hits, false, false, entry.shadow);
                let code = if entry.shadow {
                    Code::Ok
                } else {
                    Code::OverLimit
                };
                return Ok(DescriptorStatus {
                    code,
                    limit: Some(applied(entry, None)),
                    remaining: Some(0),
                    reset_after_ns: 0,
                    retry_after_ns: None,
                });
            }
            Action::Limit(policy) => policy,
        };
        let key = store_key(domain, &descriptor.entries);
        let result = if descriptor.negative {
            self.backend.refund(&key, policy, hits).await
        } else {
            self.backend.check(&key, policy, hits).await
        };
        let decision = match result {
            Ok(decision) => decision,
            Err(source) => {
                label.store_error();
                // The breaker logged its opening; each decision it then
                // refuses is only worth a debug line.
                if source.is_short_circuit() {
                    tracing::debug!(limit = %entry.path, error = %source, "store error");
                } else {
                    tracing::warn!(limit = %entry.path, error = %source, "store error");
                }
                match (entry.on_store_error, &self.fallback) {
                    (StoreErrorMode::Open, _) => {
                        return Ok(DescriptorStatus::unlimited_ok(Some(0)))
                    }
                    // A refund has nothing to decide: the hits go back to
                    // the store or nowhere.
                    (StoreErrorMode::Fallback, Some(_)) if descriptor.negative => {
                        return Ok(DescriptorStatus::unlimited_ok(Some(0)))
                    }
                    (StoreErrorMode::Fallback, Some(fallback)) => {
                        fallback.decide(&key, policy, hits)
                    }
                    (StoreErrorMode::Closed | StoreErrorMode::Fallback, _) => {
                        return Err(CheckError::Store {
                            path: entry.path.clone(),
                            source,
                        })
                    }
                }
            }
        };
        let tight = tightest(policy.limits(), &decision);
        let near = decision.allowed && near_limit(&decision);
        label.decided(hits, decision.allowed, near, entry.shadow);
        let code = if decision.allowed || entry.shadow {
            Code::Ok
        } else {
            Code::OverLimit
        };
        Ok(DescriptorStatus {
            code,
            limit: Some(applied(entry, Some(tight))),
            remaining: Some(decision.remaining),
            reset_after_ns: decision.reset_after,
            retry_after_ns: (!decision.allowed)
                .then(|| decision.retry_after.as_nanos().unwrap_or(u64::MAX)),
        })
    }
}

fn applied(entry: &LimitEntry, limit: Option<Limit>) -> AppliedLimit {
    AppliedLimit {
        name: entry.name.clone().unwrap_or_else(|| entry.path.clone()),
        limit,
    }
}

/// The policy's limit the decision's numbers come from.
fn tightest(limits: &[Limit], decision: &Decision) -> Limit {
    limits
        .iter()
        .copied()
        .find(|l| l.capacity() == decision.limit)
        .unwrap_or(limits[0])
}

/// envoyproxy/ratelimit's near-limit mark: 80 % of the limit used.
fn near_limit(decision: &Decision) -> bool {
    decision.remaining.saturating_mul(5) < decision.limit
}

/// The store key of a descriptor: domain and entries, each part escaped so
/// that different descriptors never share a key.
pub fn store_key(domain: &str, entries: &[(String, String)]) -> String {
    let mut key = String::with_capacity(64);
    escape_into(&mut key, domain);
    for (k, v) in entries {
        key.push('/');
        escape_into(&mut key, k);
        key.push('=');
        escape_into(&mut key, v);
    }
    key
}

fn escape_into(out: &mut String, part: &str) {
    for c in part.chars() {
        match c {
            '/' | '=' | '%' => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_keys_never_collide_across_separators() {
        let a = store_key("d", &[("a=b".into(), "c".into())]);
        let b = store_key("d", &[("a".into(), "b=c".into())]);
        assert_ne!(a, b);
        assert_eq!(store_key("d/x", &[]), "d%2Fx");
        assert_eq!(b, "d/a=b%3Dc");
    }
}
