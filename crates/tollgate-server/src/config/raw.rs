//! The file as written: serde shapes with source locations, before any
//! meaning is given to them (that is [`super::build`]'s job).

use serde::Deserialize;
use serde_saphyr::Spanned;
use tollgate_http::{ClientIp, Cost, Key, Matcher, MissingKey, Mode};

/// The whole file: an envoyproxy/ratelimit file (`domain` and
/// `descriptors`), a list of them under `domains`, or both, plus the HTTP
/// rules of the proxy mode.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct File {
    pub domain: Option<Spanned<String>>,
    #[serde(default)]
    pub descriptors: Vec<Descriptor>,
    #[serde(default)]
    pub domains: Vec<Domain>,
    #[serde(default)]
    pub http: Option<Http>,
    /// The memory store's bounds (the flags win).
    pub memory: Option<Memory>,
    pub store: Option<Spanned<Store>>,
    /// The shape of the heavy-hitter summaries behind `/v1/top` (the flags
    /// win).
    pub top: Option<Top>,
}

/// `top: { keys, sub_window, sub_windows }`.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Top {
    pub keys: Option<Spanned<usize>>,
    pub sub_window: Option<Spanned<String>>,
    pub sub_windows: Option<Spanned<usize>>,
}

/// `memory: { max_keys, sweep_every }`.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Memory {
    pub max_keys: Option<Spanned<usize>>,
    pub sweep_every: Option<Spanned<String>>,
}

/// The `store` section: how the server guards its calls to the store.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Store {
    pub instances: Option<u32>,
    pub breaker: Option<Breaker>,
    pub batch: Option<Batch>,
}

/// The store's circuit breaker; every field defaults to the library's.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Breaker {
    pub consecutive_failures: Option<u32>,
    pub failure_ratio: Option<f64>,
    pub min_calls: Option<u32>,
    pub window: Option<String>,
    pub open_for: Option<String>,
    pub probes: Option<u32>,
}

/// Leases of hot keys' units in batches; every field defaults to the
/// library's.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Batch {
    pub size: Option<u64>,
    pub hot_rate: Option<u32>,
    pub lease_ttl: Option<String>,
    pub max_leases: Option<usize>,
}

/// One domain and its descriptor tree.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Domain {
    pub domain: Spanned<String>,
    #[serde(default)]
    pub descriptors: Vec<Descriptor>,
}

/// One node of a descriptor tree, envoyproxy/ratelimit's fields first.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Descriptor {
    pub key: Spanned<String>,
    pub value: Option<String>,
    pub rate_limit: Option<Spanned<RateLimit>>,
    #[serde(default)]
    pub descriptors: Vec<Descriptor>,
    #[serde(default)]
    pub shadow_mode: bool,
    #[serde(default)]
    pub detailed_metric: bool,
    /// The request's value for this key is a secret (an API key): shown
    /// only as its digest in `/v1/top`, `/top` and the metrics.
    #[serde(default)]
    pub secret: bool,
    /// Accepted for compatibility; metric names do not change with it.
    #[serde(default)]
    #[allow(dead_code)]
    pub value_to_metric: bool,
    pub on_store_error: Option<StoreErrorMode>,
    /// envoyproxy/ratelimit's `share_threshold`: every value a `*` value
    /// matches shares one counter.
    #[serde(default)]
    pub share_threshold: bool,
    /// envoyproxy/ratelimit's `quota_mode`: over the limit does not refuse
    /// the request unless every quota of the request is over.
    #[serde(default)]
    pub quota_mode: bool,
}

/// What a descriptor limits: envoyproxy/ratelimit's `unit` and
/// `requests_per_unit`, or tollgate's `period`, `algorithm`, `burst`, or
/// several `limits` applied atomically.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RateLimit {
    pub name: Option<String>,
    #[serde(default)]
    pub replaces: Vec<Replace>,
    #[serde(default)]
    pub unlimited: bool,
    pub requests_per_unit: Option<u64>,
    pub unit: Option<String>,
    pub period: Option<String>,
    pub algorithm: Option<String>,
    pub burst: Option<u64>,
    #[serde(default)]
    pub limits: Vec<Spanned<QuotaSpec>>,
}

impl RateLimit {
    /// The single limit written inline (envoyproxy/ratelimit's form).
    pub fn inline(&self) -> QuotaSpec {
        QuotaSpec {
            requests_per_unit: self.requests_per_unit,
            unit: self.unit.clone(),
            period: self.period.clone(),
            algorithm: self.algorithm.clone(),
            burst: self.burst,
        }
    }

    /// Whether any inline quota field was written.
    pub fn has_inline(&self) -> bool {
        self.requests_per_unit.is_some()
            || self.unit.is_some()
            || self.period.is_some()
            || self.algorithm.is_some()
            || self.burst.is_some()
    }
}

/// One limit: a rate (`requests_per_unit` per `unit` or per `period`), an
/// algorithm (fixed window by default, as envoyproxy/ratelimit) and a burst.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct QuotaSpec {
    pub requests_per_unit: Option<u64>,
    pub unit: Option<String>,
    pub period: Option<String>,
    pub algorithm: Option<String>,
    pub burst: Option<u64>,
}

/// A limit replaced by the one carrying it, by name.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Replace {
    pub name: String,
}

/// A descriptor's behaviour when the store fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreErrorMode {
    /// The descriptor is answered OK (counted and logged).
    #[default]
    Open,
    /// The call fails: gRPC `UNAVAILABLE` (Envoy's `failure_mode_deny`
    /// then decides), HTTP 503.
    Closed,
    /// Decided in this process with its share of the limit (the limit
    /// divided by the `store` section's `instances`), as
    /// `tollgate::OnStoreError::Fallback`.
    Fallback,
}

/// The proxy mode's rules, in the HTTP layer's own vocabulary.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Http {
    #[serde(default)]
    pub rules: Vec<Spanned<HttpRule>>,
    /// The load balancers in front of the proxy, for every rule's `ip` key.
    #[serde(default)]
    pub client_ip: ClientIp,
}

/// One `tollgate_http::Rule`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HttpRule {
    pub name: String,
    #[serde(default, rename = "match")]
    pub matcher: Matcher,
    pub key: Option<Key>,
    /// This rule's own load balancers, instead of `http.client_ip`.
    pub client_ip: Option<ClientIp>,
    pub cost: Option<Cost>,
    /// The least a client-chosen cost may be (1 when absent).
    pub min_cost: Option<Spanned<u64>>,
    #[serde(default)]
    pub mode: Mode,
    #[serde(default)]
    pub on_store_error: StoreErrorMode,
    #[serde(default)]
    pub on_missing_key: MissingKey,
    pub limit: Option<Spanned<QuotaSpec>>,
    #[serde(default)]
    pub limits: Vec<Spanned<QuotaSpec>>,
}
