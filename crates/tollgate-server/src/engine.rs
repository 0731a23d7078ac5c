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

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use tollgate::top::{HeavyHitters, Hit, Top, TopConfig};
use tollgate::{
    Algorithm, Backend, BackendError, BackendExt, Clock, Decision, Limit, MonotonicClock, Policy,
    Quota, UnixClock,
};
use tollgate_http::{OnStoreError as HttpOnStoreError, Rule};

use crate::answers::{Answers, Counting};
use crate::config::{Action, Config, LimitEntry, Match, StoreErrorMode, UpstreamLimit};
use crate::metrics;
use crate::store::{Fallback, RuleFallback, StoreHealth};

const NS_PER_SEC: u64 = 1_000_000_000;

/// A limit sent with the request (`RateLimitDescriptor.limit`), used
/// instead of the file's, as envoyproxy/ratelimit does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitOverride {
    /// Requests per window.
    pub requests_per_unit: u64,
    /// The window, in nanoseconds (a unit: second to year).
    pub period_ns: u64,
}

/// One descriptor of a request: its entries and, optionally, its own hits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DescriptorRequest {
    /// `(key, value)` entries, in order.
    pub entries: Vec<(String, String)>,
    /// This descriptor's hits, overriding the request's (0 only asks).
    pub hits: Option<u64>,
    /// Give the hits back instead of spending them.
    pub negative: bool,
    /// The request's own limit for this descriptor, if it sent one.
    pub limit: Option<LimitOverride>,
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
    /// The file's `rate_limit.name`, if it gave one (what
    /// envoyproxy/ratelimit reports, empty otherwise).
    pub name: Option<String>,
    /// The limit's path in the configuration (`domain.key_value`).
    pub path: String,
    /// Requests per window, as reported.
    pub requests_per_unit: u64,
    /// The window, in nanoseconds (1 s when the file named none).
    pub period_ns: u64,
    /// The limit that decided (the tightest of a policy's); `None` for a
    /// `requests_per_unit: 0` limit.
    pub limit: Option<Limit>,
}

impl AppliedLimit {
    /// The name, or the path when the file gave none: what tollgate's own
    /// API and `RateLimit` fields call the limit.
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.path)
    }
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
    /// Nanoseconds until the key is back to full (envoyproxy/ratelimit's
    /// counting: until its window ends, in whole seconds).
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
    /// Over if any descriptor is over (envoyproxy/ratelimit's rules for
    /// `quota_mode` and `SHADOW_MODE` applied).
    pub overall: Code,
    /// One per descriptor, in the request's order.
    pub statuses: Vec<DescriptorStatus>,
    /// The descriptor closest to its limit, envoyproxy/ratelimit's choice
    /// for its limit headers: the least remaining, or the last one over.
    pub closest: Option<usize>,
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
    /// An entry's key or value is longer than [`MAX_ENTRY_BYTES`]: refused
    /// rather than stored, so a client cannot fill the store with its data.
    #[error("descriptor {descriptor} entry {entry}: the {part} is {len} bytes, more than the {MAX_ENTRY_BYTES} allowed")]
    TooLong {
        /// The descriptor's index.
        descriptor: usize,
        /// The entry's index in it.
        entry: usize,
        /// `key` or `value`.
        part: &'static str,
        /// Its length.
        len: usize,
    },
    /// A limit configured to fail closed could not reach its store.
    #[error("the store failed for `{path}`: {source}")]
    Store {
        /// The limit's path.
        path: String,
        /// The store's error.
        source: BackendError,
    },
}

/// Where a server's configuration and store come from, for `/v1/top`.
pub struct Provenance {
    /// The configuration's source: its file, or what stands for none.
    pub config_source: String,
    /// The store's URL, its password redacted.
    pub store_url: String,
    /// The store's breaker.
    pub health: Arc<dyn StoreHealth>,
}

/// The decision engine: the current configuration (swapped whole on
/// reload) over one store.
pub struct Engine<B: Backend> {
    active: ArcSwap<Active<B>>,
    backend: B,
    answers: Answers,
    /// Decides `on_store_error: fallback` limits when the store fails;
    /// without it they fail closed.
    fallback: Option<Arc<dyn Fallback>>,
    /// Each limit's heaviest keys, by path, for `/v1/top`.
    top: Arc<Top>,
    /// The time `top` counts on.
    clock: Arc<dyn Clock>,
    /// When the configuration in force was put in force (Unix
    /// nanoseconds, on `wall`).
    loaded_at: AtomicU64,
    /// The time `loaded_at` is read on.
    wall: Arc<dyn Clock>,
    /// Where the configuration and store come from, when a server said.
    provenance: Option<Provenance>,
}

/// A configuration with its policies as the store prepared them when it
/// was put in force, so a request finds its limit's without a lookup.
struct Active<B: Backend> {
    config: Arc<Config>,
    /// By the index of each of [`Config::entries`].
    prepared: Vec<EntryPolicies<B::Prepared>>,
}

/// A configured limit's policies, prepared; `None` for a policy the store
/// refused (prepared again by each request, which reports the refusal).
/// With them, the limit's heavy-hitter summary, found once here rather
/// than by name on every request (`None` beyond the summaries' bound on
/// rules).
struct EntryPolicies<P> {
    limit: Option<P>,
    counting: Option<P>,
    top: Option<Arc<HeavyHitters>>,
}

impl<B: Backend> Active<B> {
    fn new(config: Config, backend: &B, top: &Top) -> Self {
        let prepare = |policy: &Policy| backend.prepare(policy).ok();
        let prepared = config
            .entries()
            .iter()
            .map(|entry| EntryPolicies {
                limit: match &entry.action {
                    Action::Limit(policy) => prepare(policy),
                    _ => None,
                },
                counting: entry.upstream.as_ref().and_then(|u| prepare(&u.counting)),
                top: top.rule(&entry.path),
            })
            .collect();
        Active {
            config: Arc::new(config),
            prepared,
        }
    }

    /// What was prepared for `entry`, unless it is a request's own limit.
    fn policies(&self, entry: &LimitEntry) -> Option<&EntryPolicies<B::Prepared>> {
        self.prepared.get(entry.index?)
    }
}

/// What one descriptor of a request is decided by.
// The large variant is the common one (a limit matched); boxing it would
// allocate for every descriptor of every request to shrink the rare ones.
#[allow(clippy::large_enum_variant)]
enum Target<'c> {
    /// No limit matched (or it was replaced): OK, nothing counted.
    Nothing,
    /// `unlimited: true`.
    Unlimited,
    /// A limit, counted under `key`.
    Limited {
        entry: Cow<'c, LimitEntry>,
        key: String,
    },
}

impl<B: Backend> Engine<B> {
    /// An engine deciding `config` in `backend`, answering as
    /// envoyproxy/ratelimit does.
    pub fn new(config: Config, backend: B) -> Self {
        Engine::with_answers(config, backend, Answers::default())
    }

    /// An engine answering by `answers`.
    pub fn with_answers(config: Config, backend: B, answers: Answers) -> Self {
        let top = Arc::new(Top::new(TopConfig::default()));
        Engine {
            active: ArcSwap::from_pointee(Active::new(config, &backend, &top)),
            backend,
            answers,
            fallback: None,
            top,
            clock: Arc::new(MonotonicClock::new()),
            loaded_at: AtomicU64::new(0),
            wall: Arc::new(UnixClock::new()),
            provenance: None,
        }
        .loaded_now()
    }

    /// Records that the configuration in force was put in force now.
    fn loaded_now(self) -> Self {
        self.loaded_at.store(self.wall.now(), Ordering::Relaxed);
        self
    }

    /// The same, with the time of the configuration's loads read on
    /// `clock` (Unix nanoseconds; [`UnixClock`] by default).
    pub fn with_wall_clock(mut self, clock: impl Clock + 'static) -> Self {
        self.wall = Arc::new(clock);
        self.loaded_now()
    }

    /// The same, telling `/v1/top` where its configuration and store come
    /// from.
    pub fn with_provenance(mut self, provenance: Provenance) -> Self {
        self.provenance = Some(provenance);
        self
    }

    /// Where the configuration and store come from, when said.
    pub fn provenance(&self) -> Option<&Provenance> {
        self.provenance.as_ref()
    }

    /// When the configuration in force was put in force (Unix seconds).
    pub fn loaded_at_s(&self) -> u64 {
        self.loaded_at.load(Ordering::Relaxed) / 1_000_000_000
    }

    /// The same, summarising each limit's heaviest keys in `config`'s
    /// shape on `clock` (by default [`TopConfig::default`] on a
    /// [`MonotonicClock`]).
    pub fn with_top(mut self, config: TopConfig, clock: impl Clock + 'static) -> Self {
        self.top = Arc::new(Top::new(config));
        self.clock = Arc::new(clock);
        // The limits' summaries are found when a configuration is put in
        // force: found again, in the new summaries.
        let config = Config::clone(&self.active.load().config);
        self.active = ArcSwap::from_pointee(Active::new(config, &self.backend, &self.top));
        self
    }

    /// Each limit's heaviest keys, by the limit's path, and the reverse
    /// proxy's HTTP rules', by name.
    pub fn top(&self) -> &Arc<Top> {
        &self.top
    }

    /// The clock [`Engine::top`] counts on.
    pub fn top_clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The time on the clock [`Engine::top`] counts on.
    pub fn top_now(&self) -> u64 {
        self.clock.now()
    }

    /// Counts a decided descriptor in its limit's heavy-hitter summary. A
    /// limit the request sent is no rule of the file's (and its paths are
    /// the client's to invent), and a refund is no hit: neither is counted.
    fn count_top(
        &self,
        policies: Option<&EntryPolicies<B::Prepared>>,
        entry: &LimitEntry,
        key: &str,
        descriptor: &DescriptorRequest,
        hits: u64,
        allowed: bool,
    ) {
        if descriptor.limit.is_some() || descriptor.negative || hits == 0 {
            return;
        }
        let Some(top) = policies.and_then(|p| p.top.as_ref()) else {
            return;
        };
        let hit = Hit::decided(allowed, entry.shadow);
        let key = crate::secret::shown_key(&entry.secret, key);
        top.record(self.clock.now(), &key, hit, hits);
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
        Arc::clone(&self.active.load().config)
    }

    /// Puts `config` in force for the requests that start from now on;
    /// those in flight finish under the one they started with.
    pub fn replace_config(&self, config: Config) {
        if config.store() != self.active.load().config.store() {
            tracing::warn!("the `store` section changed: it applies from the next start, the running store keeps its settings");
        }
        if config.top() != self.active.load().config.top() {
            tracing::warn!("the `top` section changed: it applies from the next start, the running summaries keep their shape");
        }
        // Prepared before the swap: a policy kept across the reload keeps
        // its state in the store (the memory store's limiter, its keys).
        self.active
            .store(Arc::new(Active::new(config, &self.backend, &self.top)));
        self.loaded_at.store(self.wall.now(), Ordering::Relaxed);
    }

    /// The store.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// How the engine answers.
    pub fn answers(&self) -> &Answers {
        &self.answers
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
        too_long(&request.descriptors)?;
        // Held to the end, so a reload never changes a request midway.
        let active = self.active.load_full();
        let targets = targets(&active.config, request);
        let hits: Vec<u64> = request
            .descriptors
            .iter()
            .map(|d| d.hits.unwrap_or(request.hits.max(1)))
            .collect();
        let charges = self.charges(&active, &targets, request, &hits).await;
        let mut statuses = Vec::with_capacity(targets.len());
        for (i, target) in targets.iter().enumerate() {
            let descriptor = &request.descriptors[i];
            let status = match target {
                Target::Nothing => DescriptorStatus::unlimited_ok(Some(0)),
                Target::Unlimited => DescriptorStatus::unlimited_ok(None),
                Target::Limited { entry, key } => {
                    self.decide(&active, key, hits[i], charges[i], descriptor, entry)
                        .await?
                }
            };
            statuses.push(status);
        }
        let overall = self.overall(&targets, request, &statuses);
        Ok(CheckResponse {
            overall,
            closest: closest(&targets, &statuses),
            statuses,
        })
    }

    /// What each descriptor counted in envoyproxy/ratelimit's way is
    /// charged: its hits, unless `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`
    /// is set and another descriptor would go over (then only those that
    /// would go over are charged, as upstream does, after reading them).
    async fn charges(
        &self,
        active: &Active<B>,
        targets: &[Target<'_>],
        request: &CheckRequest,
        hits: &[u64],
    ) -> Vec<u64> {
        let mut charges = hits.to_vec();
        if !self.answers.stop_increment_when_over || self.answers.counting != Counting::Upstream {
            return charges;
        }
        let mut would_go_over = vec![false; targets.len()];
        for (i, target) in targets.iter().enumerate() {
            let Target::Limited { entry, key } = target else {
                continue;
            };
            let Some(upstream) = &entry.upstream else {
                continue;
            };
            if request.descriptors[i].negative {
                continue;
            }
            // A failed read is left to the charge, which meets the failure
            // again and answers it by the limit's `on_store_error`.
            let slot = active.policies(entry).and_then(|p| p.counting.as_ref());
            let peek = async {
                let counting = self.prepared(slot, &upstream.counting)?;
                self.backend.check(key, &counting, 0).await
            };
            if let Ok(now) = peek.await {
                would_go_over[i] = now.remaining <= hits[i];
            }
        }
        if would_go_over.contains(&true) {
            for (charge, over) in charges.iter_mut().zip(&would_go_over) {
                if !over {
                    *charge = 0;
                }
            }
        }
        charges
    }

    async fn decide(
        &self,
        active: &Active<B>,
        key: &str,
        hits: u64,
        charge: u64,
        descriptor: &DescriptorRequest,
        entry: &LimitEntry,
    ) -> Result<DescriptorStatus, CheckError> {
        let label = metrics::Label::new(entry, &descriptor.entries);
        let policies = active.policies(entry);
        if self.answers.counting == Counting::Upstream {
            if let Some(upstream) = &entry.upstream {
                return self
                    .count(
                        key, hits, charge, descriptor, entry, upstream, policies, &label,
                    )
                    .await;
            }
        }
        let policy = match &entry.action {
            Action::Unlimited => return Ok(DescriptorStatus::unlimited_ok(None)),
            Action::Block => {
                label.decided(hits, false, false, entry.shadow);
                self.count_top(policies, entry, key, descriptor, hits, false);
                let period_ns = entry.upstream.as_ref().map(|u| u.period_ns);
                return Ok(DescriptorStatus {
                    code: shadowed(Code::OverLimit, entry.shadow),
                    limit: Some(applied(entry, 0, period_ns, None)),
                    remaining: Some(0),
                    reset_after_ns: period_ns.map_or(0, |p| whole_seconds(unit_reset_now(p), p)),
                    retry_after_ns: None,
                });
            }
            Action::Limit(policy) => policy,
        };
        let slot = policies.and_then(|p| p.limit.as_ref());
        let result = async {
            let prepared = self.prepared(slot, policy)?;
            if descriptor.negative {
                self.backend.refund(key, &prepared, hits).await
            } else {
                self.backend.check(key, &prepared, hits).await
            }
        }
        .await;
        let decision = match result {
            Ok(decision) => decision,
            Err(source) => {
                match self.store_failed(
                    entry,
                    &label,
                    source,
                    key,
                    policy,
                    hits,
                    descriptor.negative,
                )? {
                    Some(decision) => decision,
                    None => return Ok(DescriptorStatus::unlimited_ok(Some(0))),
                }
            }
        };
        let tight = tightest(policy.limits(), &decision);
        let used = decision.limit.saturating_sub(decision.remaining);
        let near = decision.allowed && used > self.answers.near_threshold(decision.limit);
        label.decided(hits, decision.allowed, near, entry.shadow);
        self.count_top(policies, entry, key, descriptor, hits, decision.allowed);
        let code = if decision.allowed {
            Code::Ok
        } else {
            Code::OverLimit
        };
        Ok(DescriptorStatus {
            code: shadowed(code, entry.shadow),
            limit: Some(applied(
                entry,
                tight.quota.limit(),
                Some(tight.quota.period_ns()),
                Some(tight),
            )),
            remaining: Some(decision.remaining),
            reset_after_ns: decision.reset_after,
            retry_after_ns: (!decision.allowed)
                .then(|| decision.retry_after.as_nanos().unwrap_or(u64::MAX)),
        })
    }

    /// envoyproxy/ratelimit's counting, in one atomic store call: every
    /// hit is charged to a window one larger than the limit, so what is
    /// left there tells a count past the limit (over, 0 left) from one at
    /// it (OK, 0 left).
    #[allow(clippy::too_many_arguments)]
    async fn count(
        &self,
        key: &str,
        hits: u64,
        charge: u64,
        descriptor: &DescriptorRequest,
        entry: &LimitEntry,
        upstream: &UpstreamLimit,
        policies: Option<&EntryPolicies<B::Prepared>>,
        label: &metrics::Label,
    ) -> Result<DescriptorStatus, CheckError> {
        let negative = descriptor.negative;
        let counting = policies.and_then(|p| p.counting.as_ref());
        let result = async {
            let counting = self.prepared(counting, &upstream.counting)?;
            if negative {
                self.backend.refund(key, &counting, hits).await
            } else {
                self.backend.force(key, &counting, charge).await
            }
        }
        .await;
        let (over, remaining, reset_after) = match result {
            Ok(d) => (
                d.remaining == 0,
                d.remaining.saturating_sub(1),
                d.reset_after,
            ),
            Err(source) => {
                // The fallback decides by tollgate's rules on the limit
                // itself: a local share has no counter to keep growing.
                let policy = match &entry.action {
                    Action::Limit(policy) => policy,
                    _ => &upstream.counting,
                };
                match self.store_failed(entry, label, source, key, policy, charge, negative)? {
                    Some(d) => (!d.allowed, d.remaining, d.reset_after),
                    None => return Ok(DescriptorStatus::unlimited_ok(Some(0))),
                }
            }
        };
        let count = upstream.requests_per_unit - remaining;
        let near = !over && count > self.answers.near_threshold(upstream.requests_per_unit);
        label.decided(hits, !over, near, entry.shadow);
        self.count_top(policies, entry, key, descriptor, hits, !over);
        let reset = if reset_after > 0 {
            reset_after
        } else {
            unit_reset_now(upstream.period_ns)
        };
        let reset = whole_seconds(reset, upstream.period_ns);
        let code = if over { Code::OverLimit } else { Code::Ok };
        Ok(DescriptorStatus {
            code: shadowed(code, entry.shadow),
            limit: Some(applied(
                entry,
                upstream.requests_per_unit,
                Some(upstream.period_ns),
                single_limit(&entry.action),
            )),
            remaining: Some(remaining),
            reset_after_ns: reset,
            // More hits than the limit holds are over in every window:
            // reported as never fitting, as tollgate's counting does.
            retry_after_ns: over.then_some(if hits > upstream.requests_per_unit {
                u64::MAX
            } else {
                reset
            }),
        })
    }

    /// `policy` as prepared when its configuration was put in force
    /// (`slot`), or prepared now: a request's own limit, or one the store
    /// refused then (whose refusal this reports).
    fn prepared<'p>(
        &self,
        slot: Option<&'p B::Prepared>,
        policy: &Policy,
    ) -> Result<Cow<'p, B::Prepared>, BackendError> {
        match slot {
            Some(prepared) => Ok(Cow::Borrowed(prepared)),
            None => self.backend.prepare(policy).map(Cow::Owned),
        }
    }

    /// What a store failure answers, by the limit's `on_store_error`: the
    /// fallback's decision (`Some`), OK without a decision (`None`, failing
    /// open), or the error (failing closed).
    #[allow(clippy::too_many_arguments)]
    fn store_failed(
        &self,
        entry: &LimitEntry,
        label: &metrics::Label,
        source: BackendError,
        key: &str,
        policy: &Policy,
        hits: u64,
        negative: bool,
    ) -> Result<Option<Decision>, CheckError> {
        label.store_error();
        // The breaker logged its opening; each decision it then refuses is
        // only worth a debug line.
        if source.is_short_circuit() {
            tracing::debug!(limit = %entry.path, error = %source, "store error");
        } else {
            tracing::warn!(limit = %entry.path, error = %source, "store error");
        }
        match (entry.on_store_error, &self.fallback) {
            (StoreErrorMode::Open, _) => Ok(None),
            // A refund has nothing to decide: the hits go back to the store
            // or nowhere.
            (StoreErrorMode::Fallback, Some(_)) if negative => Ok(None),
            (StoreErrorMode::Fallback, Some(fallback)) => {
                Ok(Some(fallback.decide(key, policy, hits)))
            }
            (StoreErrorMode::Closed | StoreErrorMode::Fallback, _) => Err(CheckError::Store {
                path: entry.path.clone(),
                source,
            }),
        }
    }

    /// The request's verdict, by envoyproxy/ratelimit's rules: over when a
    /// descriptor outside `quota_mode` is over, or when every group of
    /// `quota_mode` descriptors is; always OK under `SHADOW_MODE`.
    fn overall(
        &self,
        targets: &[Target<'_>],
        request: &CheckRequest,
        statuses: &[DescriptorStatus],
    ) -> Code {
        let mut failed = false;
        let mut quota_groups: HashMap<String, bool> = HashMap::new();
        for (i, (target, status)) in targets.iter().zip(statuses).enumerate() {
            let over = status.code == Code::OverLimit;
            let quota = matches!(target, Target::Limited { entry, .. } if entry.quota_mode);
            if quota {
                let group = quota_group(&request.descriptors[i].entries);
                *quota_groups.entry(group).or_default() |= over;
            } else {
                failed |= over;
            }
        }
        let quotas_over = !quota_groups.is_empty() && quota_groups.values().all(|&over| over);
        if (failed || quotas_over) && !self.answers.global_shadow {
            Code::OverLimit
        } else {
            Code::Ok
        }
    }
}

/// The longest key or value of a descriptor entry, in bytes: the HTTP
/// layer's bound on a key ([`tollgate_http::MAX_KEY_BYTES`]). A store key is
/// then at most the configuration's depth times twice that.
pub const MAX_ENTRY_BYTES: usize = tollgate_http::MAX_KEY_BYTES;

/// The first entry of `descriptors` over [`MAX_ENTRY_BYTES`], as an error.
fn too_long(descriptors: &[DescriptorRequest]) -> Result<(), CheckError> {
    for (descriptor, d) in descriptors.iter().enumerate() {
        for (entry, (key, value)) in d.entries.iter().enumerate() {
            for (part, text) in [("key", key), ("value", value)] {
                if text.len() > MAX_ENTRY_BYTES {
                    return Err(CheckError::TooLong {
                        descriptor,
                        entry,
                        part,
                        len: text.len(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// What each descriptor is decided by: the request's own limit in a known
/// domain, else the file's (unless another matched limit replaces it).
fn targets<'c>(config: &'c Config, request: &CheckRequest) -> Vec<Target<'c>> {
    let domain = &request.domain;
    let known = config.has_domain(domain);
    let matches: Vec<Option<Match<'c>>> = request
        .descriptors
        .iter()
        .map(|d| match d.limit {
            Some(_) if known => None,
            _ => config.lookup(domain, &d.entries),
        })
        .collect();
    // As upstream: unlimited limits replace too.
    let replaced: HashSet<&str> = matches
        .iter()
        .flatten()
        .flat_map(|m| m.entry.replaces.iter().map(String::as_str))
        .collect();
    request
        .descriptors
        .iter()
        .zip(matches)
        .map(|(d, m)| match (d.limit, m) {
            (Some(limit), _) if known => Target::Limited {
                entry: Cow::Owned(override_entry(domain, &d.entries, limit)),
                key: store_key(domain, &d.entries),
            },
            (_, None) => Target::Nothing,
            // Unlimited before replaced, as upstream marks it first.
            (_, Some(m)) if m.entry.action == Action::Unlimited => Target::Unlimited,
            (_, Some(m))
                if m.entry
                    .name
                    .as_deref()
                    .is_some_and(|n| replaced.contains(n)) =>
            {
                Target::Nothing
            }
            (_, Some(m)) => Target::Limited {
                entry: Cow::Borrowed(m.entry.as_ref()),
                key: store_key(domain, &m.counter_entries),
            },
        })
        .collect()
}

/// The limit a request sent, as a file's would be: no name, a path built
/// from the request's entries (as envoyproxy/ratelimit names its
/// statistics), never in shadow mode.
fn override_entry(domain: &str, entries: &[(String, String)], limit: LimitOverride) -> LimitEntry {
    let mut path = domain.to_string();
    for (k, v) in entries {
        path.push('.');
        path.push_str(&crate::config::composite(k, Some(v)));
    }
    let quota = Quota::with_parts(
        limit.requests_per_unit,
        limit.period_ns,
        limit.requests_per_unit,
    );
    let action = match quota {
        Ok(quota) => Action::Limit(Policy::new(Limit::new(Algorithm::FixedWindow, quota))),
        Err(_) => Action::Block,
    };
    LimitEntry {
        path,
        name: None,
        replaces: Vec::new(),
        action,
        shadow: false,
        detailed_metric: false,
        secret: Vec::new(),
        on_store_error: StoreErrorMode::Open,
        quota_mode: false,
        upstream: UpstreamLimit::new(limit.requests_per_unit, limit.period_ns),
        index: None,
    }
}

/// envoyproxy/ratelimit's quota group of a descriptor: its
/// `backend_name` and `model_name_override` entries when it has either,
/// else all its entries.
fn quota_group(entries: &[(String, String)]) -> String {
    let find = |name: &str| {
        entries
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    };
    let (backend, model) = (find("backend_name"), find("model_name_override"));
    if !backend.is_empty() || !model.is_empty() {
        return format!("{backend}|{model}");
    }
    entries.iter().map(|(k, v)| format!("{k}={v};")).collect()
}

/// The descriptor envoyproxy/ratelimit's limit headers describe: among
/// the limited ones, the least remaining; a descriptor over its limit
/// (outside `quota_mode`) takes the place, the last one winning.
fn closest(targets: &[Target<'_>], statuses: &[DescriptorStatus]) -> Option<usize> {
    let mut best: Option<(usize, u64)> = None;
    for (i, (target, status)) in targets.iter().zip(statuses).enumerate() {
        if status.limit.is_none() {
            continue;
        }
        let remaining = status.remaining.unwrap_or(u64::MAX);
        let quota = matches!(target, Target::Limited { entry, .. } if entry.quota_mode);
        if status.code == Code::OverLimit && !quota {
            best = Some((i, 0));
        } else if best.is_none_or(|(_, least)| remaining < least) {
            best = Some((i, remaining));
        }
    }
    best.map(|(i, _)| i)
}

/// A limit in `shadow_mode` is never over.
fn shadowed(code: Code, shadow: bool) -> Code {
    if shadow {
        Code::Ok
    } else {
        code
    }
}

/// The single limit of a one-limit policy (what tollgate's API details).
pub(crate) fn single_limit(action: &Action) -> Option<Limit> {
    match action {
        Action::Limit(policy) => policy.limits().first().copied(),
        _ => None,
    }
}

fn applied(
    entry: &LimitEntry,
    requests_per_unit: u64,
    period_ns: Option<u64>,
    limit: Option<Limit>,
) -> AppliedLimit {
    AppliedLimit {
        name: entry.name.clone(),
        path: entry.path.clone(),
        requests_per_unit,
        period_ns: period_ns.unwrap_or(NS_PER_SEC),
        limit,
    }
}

/// Nanoseconds from now to the end of the current `period_ns` window,
/// windows aligned on the Unix epoch: envoyproxy/ratelimit's reset time,
/// for a key nothing was counted in yet.
fn unit_reset_now(period_ns: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    period_ns - now % period_ns.max(1)
}

/// A reset rounded up to whole seconds, as envoyproxy/ratelimit counts
/// (its clock reads whole seconds); a period that is not whole seconds
/// keeps its nanoseconds.
fn whole_seconds(reset_ns: u64, period_ns: u64) -> u64 {
    if period_ns.is_multiple_of(NS_PER_SEC) {
        reset_ns.div_ceil(NS_PER_SEC) * NS_PER_SEC
    } else {
        reset_ns
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
