//! [`RateLimit`]: the tower [`Layer`], built from rules over one backend.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use tollgate::top::{HeavyHitters, Top, TopConfig};
use tollgate::{Backend, BackendError, Clock, MonotonicClock};
use tower_layer::Layer;

use crate::answer::BodyWriter;
use crate::fields::{member_name, secs_up, valid_name, write_policy_item, PolicyItem};
use crate::last_answer;
use crate::observe::{Latency, RuleMetrics};
use crate::policies::PolicyValues;
use crate::view::Reads;
use crate::{ClientIp, KillSwitch, RateLimitService, Rule, TopPage, TopService};

/// Rate limiting for a tower service (an axum `Router`, a hyper service):
/// every request is checked against the rules that match it, in order, and
/// either reaches the service (perhaps after a queueing delay) or is answered
/// by the layer.
///
/// A request is admitted only if every enforcing rule admits it; when one
/// denies, the charges the others made for it are refunded, so a refused
/// request costs nothing.
///
/// ```
/// use axum::{routing::get, Router};
/// use tollgate::{Algorithm, Limit, MemoryBackend, Quota};
/// use tollgate_http::{RateLimit, Rule};
///
/// let per_ip = Limit::new(Algorithm::Gcra, Quota::per_minute(100).unwrap());
/// let limit = RateLimit::builder(MemoryBackend::new())
///     .rule(Rule::new("per-ip", per_ip))
///     .build()
///     .unwrap();
/// let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(limit);
/// ```
pub struct RateLimit<B: Backend> {
    gate: Arc<Gate<B>>,
}

impl<B: Backend> Clone for RateLimit<B> {
    fn clone(&self) -> Self {
        RateLimit {
            gate: Arc::clone(&self.gate),
        }
    }
}

impl<B: Backend> RateLimit<B> {
    /// Starts a layer over `backend`.
    pub fn builder(backend: B) -> RateLimitBuilder<B> {
        RateLimitBuilder {
            backend,
            rules: Vec::new(),
            client_ip: ClientIp::socket(),
            switch: KillSwitch::new(),
            options: Options::default(),
            top: Summaries::Own(TopConfig::default()),
            summarise: true,
            register_metrics: false,
            clock: Arc::new(MonotonicClock::new()),
        }
    }

    /// The layer's kill switch (see [`KillSwitch`]).
    pub fn kill_switch(&self) -> KillSwitch {
        self.gate.switch.clone()
    }

    /// `GET /v1/top` for this layer's rules: each rule's heaviest keys over
    /// the last minute and ten minutes, as JSON (see [`crate::top`]). Mount
    /// it behind the application's own guard: the keys it names are its
    /// clients (header values appear as their digests, as in the store).
    pub fn top_service(&self) -> TopService {
        let rules = self.gate.rules.iter().filter_map(|c| {
            let limit = c.rule.policy.limits().first().copied();
            Some((Arc::clone(&c.rule.name), limit, Arc::clone(c.top.as_ref()?)))
        });
        TopService {
            rules: rules.collect(),
            clock: Arc::clone(&self.gate.clock),
        }
    }

    /// The live page over [`RateLimit::top_service`] mounted at
    /// `/v1/top` (see [`TopPage`]; [`TopPage::polling`] for another path).
    /// It holds no data, so it may be served unguarded; the JSON it polls
    /// must not be.
    pub fn top_page_service(&self) -> TopPage {
        TopPage::polling("/v1/top")
    }
}

impl<S, B: Backend> Layer<S> for RateLimit<B> {
    type Service = RateLimitService<S, B>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService::new(inner, Arc::clone(&self.gate))
    }
}

/// Builds a [`RateLimit`].
pub struct RateLimitBuilder<B> {
    backend: B,
    rules: Vec<Rule>,
    client_ip: ClientIp,
    switch: KillSwitch,
    options: Options,
    top: Summaries,
    summarise: bool,
    register_metrics: bool,
    clock: Arc<dyn Clock>,
}

/// Where a layer's rules keep their heavy-hitter summaries.
enum Summaries {
    /// Summaries of their own, of this shape.
    Own(TopConfig),
    /// Shared, by rule name: they outlive the layer.
    In(Arc<Top>),
}

/// Why a layer could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A rule name must be printable ASCII, so it can name a header field's
    /// list member as it is.
    #[error("rule name `{}` must be non-empty printable ASCII", .0.escape_debug())]
    BadName(String),
    /// Two rules share a name.
    #[error("two rules are named `{0}`")]
    DuplicateName(String),
    /// The backend cannot enforce a rule's policy.
    #[error("rule `{rule}`: {error}")]
    Policy {
        /// The rule's name.
        rule: String,
        /// Why.
        error: BackendError,
    },
}

impl<B: Backend> RateLimitBuilder<B> {
    /// Adds a rule; rules are decided in the order added.
    pub fn rule(mut self, rule: Rule) -> Self {
        self.rules.push(rule);
        self
    }

    /// How the client's address is found (the socket peer by default).
    pub fn client_ip(mut self, client_ip: ClientIp) -> Self {
        self.client_ip = client_ip;
        self
    }

    /// Shares this kill switch instead of a new one.
    pub fn kill_switch(mut self, switch: KillSwitch) -> Self {
        self.switch = switch;
        self
    }

    /// Whether admitted responses carry `RateLimit-Policy` and `RateLimit`
    /// (on by default).
    pub fn admitted_fields(mut self, on: bool) -> Self {
        self.options.admitted_fields = on;
        self
    }

    /// Whether responses also carry the legacy `X-RateLimit-Limit`,
    /// `-Remaining` and `-Reset` of the tightest rule (off by default).
    pub fn legacy_fields(mut self, on: bool) -> Self {
        self.options.legacy_fields = on;
        self
    }

    /// The status for a cost that can never fit (413 by default).
    pub fn too_large_status(mut self, status: StatusCode) -> Self {
        self.options.too_large = status;
        self
    }

    /// The `Retry-After` of a 503 when a fail-closed rule's store fails
    /// (1 s by default; rounded up to whole seconds, at least 1).
    pub fn unavailable_retry_after(mut self, wait: Duration) -> Self {
        let ns = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        self.options.unavailable_retry_after = secs_up(ns).max(1);
        self
    }

    /// Replaces the refusal body (RFC 9457 problem details by default).
    /// `writer` is called for every answer the layer makes itself.
    pub fn body(mut self, writer: BodyWriter) -> Self {
        self.options.body = Some(writer);
        self
    }

    /// The shape of each rule's heavy-hitter summary behind
    /// [`RateLimit::top_service`] ([`TopConfig::default`]: 100 keys per
    /// 10 s sub-window, ten minutes kept).
    pub fn top(mut self, config: TopConfig) -> Self {
        self.top = Summaries::Own(config);
        self
    }

    /// Counts each rule's keys in `top`'s summary of the rule's name, on
    /// `clock`: summaries shared with whoever else records there, that
    /// outlive this layer (a layer rebuilt on a configuration change keeps
    /// counting where the last one left off). A rule beyond `top`'s
    /// [`TopConfig::max_rules`] keeps a summary of its own.
    pub fn top_in(mut self, top: Arc<Top>, clock: Arc<dyn Clock>) -> Self {
        self.top = Summaries::In(top);
        self.clock = clock;
        self
    }

    /// Registers the layer's metrics (see [`observe`](crate::observe)) with
    /// the recorder installed when the layer is built, once, instead of
    /// looking each one up in the recorder installed at the time of every
    /// request. With the Prometheus recorder a look-up costs about 1,000
    /// instructions, and a request makes two. Call it only once the
    /// recorder is installed: a recorder installed later sees nothing from
    /// this layer.
    pub fn register_metrics_once(mut self) -> Self {
        self.register_metrics = true;
        self
    }

    /// Whether each rule's keys are counted in a heavy-hitter summary (on by
    /// default). Off, requests skip the summary altogether and
    /// [`RateLimit::top_service`] reports no rules: for measuring what the
    /// summary costs, or for a layer whose keys nobody will look at.
    pub fn summaries(mut self, on: bool) -> Self {
        self.summarise = on;
        self
    }

    /// The clock the heavy-hitter summaries are counted on
    /// ([`MonotonicClock`] by default; a [`FakeClock`](tollgate::FakeClock)
    /// in tests).
    pub fn top_clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The layer, once every rule's name and policy are checked.
    pub fn build(self) -> Result<RateLimit<B>, BuildError> {
        let mut rules = Vec::with_capacity(self.rules.len());
        for rule in self.rules {
            if !valid_name(&rule.name) {
                return Err(BuildError::BadName(rule.name.to_string()));
            }
            if rules.iter().any(|c: &Compiled<_>| c.rule.name == rule.name) {
                return Err(BuildError::DuplicateName(rule.name.to_string()));
            }
            let prepared =
                self.backend
                    .prepare(&rule.policy)
                    .map_err(|error| BuildError::Policy {
                        rule: rule.name.to_string(),
                        error,
                    })?;
            let top = self.summarise.then(|| match &self.top {
                Summaries::Own(config) => Arc::new(HeavyHitters::new(*config)),
                Summaries::In(top) => top
                    .rule(&rule.name)
                    .unwrap_or_else(|| Arc::new(HeavyHitters::new(*top.config()))),
            });
            let mut compiled = Compiled::new(rule, prepared, top);
            if self.register_metrics {
                compiled.metrics.register();
            }
            rules.push(compiled);
        }
        Ok(RateLimit {
            gate: Arc::new(Gate {
                reconciles: rules.iter().any(|c| c.rule.reconcile.is_some()),
                latency: if self.register_metrics {
                    Latency::registered()
                } else {
                    Latency::default()
                },
                reads: rules
                    .iter()
                    .fold(Reads::default(), |reads, c| reads.and(c.rule.reads())),
                policies: PolicyValues::new(rules.len()),
                backend: self.backend,
                rules,
                client_ip: self.client_ip,
                switch: self.switch,
                options: self.options,
                clock: self.clock,
                id: last_answer::layer_id(),
            }),
        })
    }
}

/// Everything a request's check needs, shared by every clone of the service.
pub(crate) struct Gate<B: Backend> {
    pub(crate) backend: B,
    pub(crate) rules: Vec<Compiled<B::Prepared>>,
    pub(crate) client_ip: ClientIp,
    pub(crate) switch: KillSwitch,
    pub(crate) options: Options,
    /// The time the heavy-hitter summaries count on.
    pub(crate) clock: Arc<dyn Clock>,
    /// `RateLimit-Policy` by set of rules shown.
    pub(crate) policies: PolicyValues,
    /// Whether a rule settles its cost with the response: only then does a
    /// response wait on the store after the inner service.
    reconciles: bool,
    /// The latency histogram, registered or looked up per request.
    pub(crate) latency: Latency,
    /// What the rules read of a request beyond what every view has.
    pub(crate) reads: Reads,
    /// This layer's [`last_answer::layer_id`].
    pub(crate) id: u64,
}

impl<B: Backend> Gate<B> {
    /// Whether admitted responses go through [`Gate::reconcile`].
    pub(crate) fn reconciles(&self) -> bool {
        self.reconciles
    }
}

/// A rule with what its answers need worked out once.
pub(crate) struct Compiled<P> {
    pub(crate) rule: Rule,
    /// The rule's policy as the backend prepared it, once.
    pub(crate) prepared: P,
    /// The rule's metric keys.
    pub(crate) metrics: RuleMetrics,
    /// Its heaviest keys, for `/v1/top` (`None` with the summaries off).
    pub(crate) top: Option<Arc<HeavyHitters>>,
    /// `q` and `w` of `RateLimit-Policy`: the policy's first limit.
    pub(crate) quota: u64,
    pub(crate) window: u64,
    /// The rule's `RateLimit-Policy` member, the same on every response
    /// unless it carries a partition key.
    pub(crate) policy_member: String,
    /// The rule's name as its `RateLimit` member starts.
    pub(crate) limit_name: String,
}

impl<P> Compiled<P> {
    fn new(rule: Rule, prepared: P, top: Option<Arc<HeavyHitters>>) -> Self {
        let first = rule.policy.limits()[0].quota;
        let (quota, window) = (first.limit(), secs_up(first.period_ns()).max(1));
        let mut policy_member = String::new();
        write_policy_item(
            &mut policy_member,
            &PolicyItem {
                name: &rule.name,
                quota,
                window,
                unit: rule.unit.as_deref(),
                partition: None,
            },
        );
        Compiled {
            limit_name: member_name(&rule.name),
            metrics: RuleMetrics::new(&rule.name),
            top,
            quota,
            window,
            policy_member,
            rule,
            prepared,
        }
    }
}

pub(crate) struct Options {
    pub(crate) admitted_fields: bool,
    pub(crate) legacy_fields: bool,
    pub(crate) too_large: StatusCode,
    pub(crate) unavailable_retry_after: u64,
    /// `None`: [`problem_json`], whose answers may be reused
    /// ([`crate::last_answer`]).
    pub(crate) body: Option<BodyWriter>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            admitted_fields: true,
            legacy_fields: false,
            too_large: StatusCode::PAYLOAD_TOO_LARGE,
            unavailable_retry_after: 1,
            body: None,
        }
    }
}
