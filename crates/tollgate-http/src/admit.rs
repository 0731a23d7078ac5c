//! One request through the rules: which apply, what each decides, and the
//! all-or-nothing settlement across them.
//!
//! Rules are decided in order, each with one atomic store call. When an
//! enforcing rule denies, the rules after it are not asked, and every charge
//! already made for the request (by enforcing and shadow rules) is refunded.
//! The guarantee, for every store: a refused request leaves each rule's key
//! as if the request had never come, exactly as the store's `refund`
//! defines it (the inverse of the charge, capped at a fresh key), unless the
//! store fails between the charge and the refund, in which case that charge
//! stands and `tollgate_http_settle_errors_total` counts it. Between the
//! charge and the refund, other requests may see the charged numbers:
//! refusals are all-or-nothing in effect, not isolated transactions.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use smallvec::SmallVec;
use tollgate::top::Hit;
use tollgate::{Backend, BackendError, BackendExt, Decision, RetryAfter};

use crate::answer::{problem_json, Reason, Refusal};
use crate::fields::{
    retry_after_secs, secs_up, write_limit_parameters, write_policy_item, PolicyItem, RATELIMIT,
    RATELIMIT_POLICY, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
};
use crate::last_answer::{self, Recall};
use crate::layer::Gate;
use crate::observe::{Op, Outcome};
use crate::policies::PolicyValues;
use crate::scratch;
use crate::{
    digest, digest_bytes, CostError, Fallback, KeyError, LimitBody, MissingKey, Mode, OnStoreError,
    RequestView,
};

/// The rules that apply to a request, inline for the usual few.
pub(crate) type Plan = SmallVec<[Planned; 3]>;

/// What each rule decided, inline for one: the response future carries
/// them to the response, and every byte inline is copied with it.
pub(crate) type Entries = SmallVec<[Entry; 1]>;

/// A rule that applies to a request, with its key and cost.
pub(crate) struct Planned {
    rule: usize,
    key: String,
    cost: u64,
}

impl Planned {
    /// The rule's place in the layer.
    pub(crate) fn rule(&self) -> usize {
        self.rule
    }
}

/// What one rule decided for the request.
pub(crate) struct Entry {
    rule: usize,
    key: String,
    cost: u64,
    /// The key's numbers after the last operation on it.
    decision: Decision,
    /// Charged in the store, so refundable.
    charged: bool,
    /// Enforcing: reported in the response's fields.
    shown: bool,
}

/// The layer's verdict on a request.
pub(crate) enum Verdict {
    /// Pass the request on, after `delay` nanoseconds.
    Admit { entries: Entries, delay: u64 },
    /// Answer it.
    Refuse { refusal: Refusal, entries: Entries },
}

impl<B: Backend> Gate<B> {
    /// The rules that apply to `view`, with keys and costs; a refusal when a
    /// key or cost cannot be read (nothing is charged then).
    pub(crate) fn plan(&self, view: &RequestView<'_>) -> Result<Plan, Refusal> {
        let mut plan = Plan::new();
        for (i, compiled) in self.rules.iter().enumerate() {
            let rule = &compiled.rule;
            if !rule.matcher.matches(view) {
                continue;
            }
            // The rule's name keeps rules with equal policies apart in one store.
            let mut key = String::with_capacity(rule.name.len() + 48);
            key.push_str(&rule.name);
            key.push('|');
            let client_ip = rule.client_ip.as_ref().unwrap_or(&self.client_ip);
            match rule.key.derive_into(view, client_ip, &mut key) {
                Ok(()) => {}
                Err(KeyError::Missing(_)) if rule.on_missing_key == MissingKey::Skip => continue,
                Err(e) => {
                    return Err(self.bad_request(i, StatusCode::BAD_REQUEST, Reason::BadKey(e)))
                }
            };
            let cost = rule.cost.at_least(rule.min_cost, view).map_err(|e| {
                let status = match e {
                    CostError::NoLength => StatusCode::LENGTH_REQUIRED,
                    _ => StatusCode::BAD_REQUEST,
                };
                self.bad_request(i, status, Reason::BadCost(e))
            })?;
            plan.push(Planned { rule: i, key, cost });
        }
        Ok(plan)
    }

    fn bad_request(&self, rule: usize, status: StatusCode, reason: Reason) -> Refusal {
        let compiled = &self.rules[rule];
        compiled.metrics.count(Outcome::BadRequest);
        Refusal {
            status,
            rule: compiled.rule.name.clone(),
            reason,
        }
    }

    fn shadowed(&self, rule: usize) -> bool {
        self.rules[rule].rule.mode == Mode::Shadow || self.switch.is_shadow_all()
    }

    /// Decides every planned rule, refunding all charges if one refuses.
    pub(crate) async fn admit(&self, plan: Plan) -> Verdict {
        let mut entries = Entries::new();
        let mut delay = 0;
        // The summaries' time, read once for every rule of the request.
        let mut now = None;
        for Planned { rule, key, cost } in plan {
            let compiled = &self.rules[rule];
            let shadow = self.shadowed(rule);
            let decided = match self.backend.check(&key, &compiled.prepared, cost).await {
                Ok(decision) => Ok((decision, decision.allowed && cost > 0)),
                Err(error) => match self.on_store_error(rule, &key, cost, &error) {
                    Fallback::Decided(decision) => Ok((decision, false)),
                    other => Err((other, error)),
                },
            };
            let (decision, charged) = match decided {
                Ok(d) => d,
                Err((verdict, error)) => {
                    let closed = verdict == Fallback::Closed && !shadow;
                    let fail = if closed { "closed" } else { "open" };
                    // An open breaker refuses calls by the thousand, and
                    // logged once when it opened.
                    if error.is_short_circuit() {
                        tracing::debug!(rule = %compiled.rule.name, key = %digest(key.as_bytes()), %error,
                            fail, "rate limit store failed");
                    } else {
                        tracing::warn!(rule = %compiled.rule.name, key = %digest(key.as_bytes()), %error,
                            fail, "rate limit store failed");
                    }
                    if closed {
                        compiled.metrics.count(Outcome::FailedClosed);
                        self.refund_all(&mut entries).await;
                        return self.unavailable(rule, entries);
                    }
                    compiled.metrics.count(Outcome::FailedOpen);
                    continue;
                }
            };
            let entry = Entry {
                rule,
                key,
                cost,
                decision,
                charged,
                shown: !shadow,
            };
            self.count_top(
                &mut now,
                rule,
                &entry.key,
                Hit::decided(decision.allowed, shadow),
                cost,
            );
            if decision.allowed {
                compiled.metrics.count(Outcome::Allowed);
                if !shadow {
                    delay = delay.max(decision.delay);
                }
                entries.push(entry);
                continue;
            }
            if shadow {
                // What a dark launch is for: seen at the default level.
                tracing::info!(rule = %compiled.rule.name, key = %digest(entry.key.as_bytes()), cost,
                    remaining = decision.remaining, retry_after_ms = retry_ms(&decision), "shadow rule would deny");
                compiled.metrics.count(Outcome::ShadowDenied);
                continue;
            }
            // Denials come in floods under attack: debug, and counted.
            tracing::debug!(rule = %compiled.rule.name, key = %digest(entry.key.as_bytes()), cost,
                remaining = decision.remaining, retry_after_ms = retry_ms(&decision), "request denied");
            self.refund_all(&mut entries).await;
            entries.push(entry);
            let (outcome, status, reason) = match decision.retry_after {
                RetryAfter::Never => (
                    Outcome::TooLarge,
                    self.options.too_large,
                    Reason::TooLarge { cost },
                ),
                RetryAfter::After(ns) => (
                    Outcome::Denied,
                    StatusCode::TOO_MANY_REQUESTS,
                    Reason::Limited {
                        retry_after: retry_after_secs(ns),
                    },
                ),
                RetryAfter::Now => (
                    Outcome::Denied,
                    StatusCode::TOO_MANY_REQUESTS,
                    Reason::Limited { retry_after: 1 },
                ),
            };
            compiled.metrics.count(outcome);
            return self.refuse(rule, status, reason, entries);
        }
        Verdict::Admit { entries, delay }
    }

    /// Counts a decided hit in the rule's heavy-hitter summary, under the
    /// key without the rule's name in front, at `now` (read on the first
    /// hit counted).
    fn count_top(&self, now: &mut Option<u64>, rule: usize, key: &str, hit: Hit, cost: u64) {
        let compiled = &self.rules[rule];
        let Some(top) = compiled.top.as_ref().filter(|_| cost > 0) else {
            return;
        };
        let key = key.get(compiled.rule.name.len() + 1..).unwrap_or(key);
        let now = *now.get_or_insert_with(|| self.clock.now());
        top.record(now, key, hit, cost);
    }

    fn on_store_error(&self, rule: usize, key: &str, cost: u64, error: &BackendError) -> Fallback {
        let rule = &self.rules[rule].rule;
        match &rule.on_store_error {
            OnStoreError::Open => Fallback::Open,
            OnStoreError::Closed => Fallback::Closed,
            OnStoreError::With(handler) => handler.on_failure(&rule.name, key, cost, error),
        }
    }

    /// `rule`'s answer when its store failed and it fails closed.
    pub(crate) fn unavailable(&self, rule: usize, entries: Entries) -> Verdict {
        let retry_after = self.options.unavailable_retry_after;
        self.refuse(
            rule,
            StatusCode::SERVICE_UNAVAILABLE,
            Reason::StoreUnavailable { retry_after },
            entries,
        )
    }

    fn refuse(&self, rule: usize, status: StatusCode, reason: Reason, entries: Entries) -> Verdict {
        let refusal = Refusal {
            status,
            rule: self.rules[rule].rule.name.clone(),
            reason,
        };
        Verdict::Refuse { refusal, entries }
    }

    /// Gives back every charge in `entries` (latest first), keeping the
    /// numbers the store reports after each refund.
    pub(crate) async fn refund_all(&self, entries: &mut [Entry]) {
        for entry in entries.iter_mut().rev().filter(|e| e.charged) {
            let compiled = &self.rules[entry.rule];
            match self
                .settle(Op::Refund, &entry.key, &compiled.prepared, entry.cost)
                .await
            {
                Ok(after) => {
                    entry.decision = Decision {
                        allowed: entry.decision.allowed,
                        ..after
                    };
                    entry.charged = false;
                }
                Err(error) => {
                    compiled.metrics.settle_failed(Op::Refund);
                    tracing::warn!(rule = %compiled.rule.name, key = %digest(entry.key.as_bytes()), %error, "refund failed; the charge stands");
                }
            }
        }
    }

    /// Counts requests whose client left while queued, once their charges
    /// are given back.
    pub(crate) async fn abandon(&self, mut entries: Entries) {
        self.refund_all(&mut entries).await;
        for entry in &entries {
            self.rules[entry.rule].metrics.count(Outcome::Abandoned);
        }
    }

    /// Settles reconciled rules with the cost the response reports: refunds
    /// what the estimate overcharged, force-charges what it missed.
    pub(crate) async fn reconcile<Body>(
        &self,
        entries: &mut [Entry],
        response: &mut Response<Body>,
    ) {
        for entry in entries.iter_mut().filter(|e| e.charged) {
            let compiled = &self.rules[entry.rule];
            let Some(reconcile) = &compiled.rule.reconcile else {
                continue;
            };
            let Some(actual) = reconcile.read(response) else {
                continue;
            };
            let policy = &compiled.prepared;
            let (op, amount) = match actual.cmp(&entry.cost) {
                std::cmp::Ordering::Equal => continue,
                std::cmp::Ordering::Less => (Op::Refund, entry.cost - actual),
                std::cmp::Ordering::Greater => (Op::Force, actual - entry.cost),
            };
            let result = self.settle(op, &entry.key, policy, amount).await;
            match result {
                Ok(after) => {
                    entry.decision = Decision {
                        allowed: true,
                        ..after
                    };
                    entry.cost = actual;
                }
                Err(error) => {
                    compiled.metrics.settle_failed(op);
                    tracing::warn!(rule = %compiled.rule.name, key = %digest(entry.key.as_bytes()), %error, op = op.name(), "reconciling the cost failed");
                }
            }
        }
        for compiled in &self.rules {
            if let Some(reconcile) = &compiled.rule.reconcile {
                reconcile.strip(response);
            }
        }
    }

    /// Gives back or adds `cost` on `key`, returning its numbers after.
    async fn settle(
        &self,
        op: Op,
        key: &str,
        policy: &B::Prepared,
        cost: u64,
    ) -> Result<Decision, BackendError> {
        match op {
            Op::Refund => self.backend.refund(key, policy, cost).await,
            Op::Force => self.backend.force(key, policy, cost).await,
        }
    }

    /// The layer's own answer.
    pub(crate) fn refused<Body>(
        &self,
        refusal: &Refusal,
        entries: &[Entry],
    ) -> Response<LimitBody<Body>> {
        let made = || self.answer(refusal, entries);
        let (fields, body) = match self.recall(refusal, entries) {
            Some(recall) => last_answer::answer(recall, made),
            None => made(),
        };
        let mut response = Response::new(LimitBody::answer(body));
        *response.status_mut() = refusal.status;
        *response.headers_mut() = fields;
        response
    }

    /// The fields and body of the answer to `refusal`.
    fn answer(&self, refusal: &Refusal, entries: &[Entry]) -> (HeaderMap, Bytes) {
        let (content_type, body) = match &self.options.body {
            Some(writer) => writer(refusal),
            None => problem_json(refusal),
        };
        let mut headers = HeaderMap::new();
        if let Some(secs) = refusal.retry_after() {
            let digits = |out: &mut String| out.push_str(itoa::Buffer::new().format(secs));
            if let Ok(value) = scratch::header_value(digits) {
                headers.insert(http::header::RETRY_AFTER, value);
            }
        }
        if matches!(
            refusal.reason,
            Reason::Limited { .. } | Reason::TooLarge { .. }
        ) {
            self.write_fields(&mut headers, entries);
        }
        headers.insert(http::header::CONTENT_TYPE, content_type);
        (headers, body)
    }

    /// What the answer to `refusal` is made from, when nothing else goes
    /// into it: a 429 with the layer's own body, showing one rule that has
    /// no partition key (see [`last_answer`]).
    fn recall(&self, refusal: &Refusal, entries: &[Entry]) -> Option<Recall> {
        let Reason::Limited { retry_after } = refusal.reason else {
            return None;
        };
        let mut shown = entries.iter().filter(|e| e.shown);
        let entry = shown.next()?;
        let rule = &self.rules[entry.rule].rule;
        let alone = shown.next().is_none() && Arc::ptr_eq(&rule.name, &refusal.rule);
        (alone && !rule.partition_key && self.options.body.is_none()).then(|| Recall {
            layer: self.id,
            rule: entry.rule,
            retry_after,
            remaining: entry.decision.remaining,
            reset: reset_secs(&entry.decision),
        })
    }

    /// Adds the rate-limit fields to an admitted response, if enabled.
    pub(crate) fn decorate(&self, headers: &mut HeaderMap, entries: &[Entry]) {
        if self.options.admitted_fields {
            self.write_fields(headers, entries);
        }
    }

    fn write_fields(&self, headers: &mut HeaderMap, entries: &[Entry]) {
        let shown = || entries.iter().filter(|e| e.shown);
        // The legacy fields follow the rule with the least left.
        let mut tightest: Option<(u64, u64, u64)> = None;
        let limit = scratch::header_value(|limit| {
            for entry in shown() {
                let compiled = &self.rules[entry.rule];
                let digest = self.partition(entry);
                let (remaining, reset) = (entry.decision.remaining, reset_secs(&entry.decision));
                if !limit.is_empty() {
                    limit.push_str(", ");
                }
                limit.push_str(&compiled.limit_name);
                write_limit_parameters(limit, remaining, reset, digest.as_ref().map(|d| &d[..8]));
                if tightest.map_or(true, |(_, r, _)| remaining < r) {
                    tightest = Some((compiled.quota, remaining, reset));
                }
            }
        })
        .ok();
        let Some((quota, remaining, reset)) = tightest else {
            return;
        };
        // Without partition keys, the policy is the same for every response
        // that shows the same rules: made once for each such set.
        let set = shown().try_fold(0u64, |set, e| {
            let fixed = !self.rules[e.rule].rule.partition_key && e.rule < PolicyValues::MAX_RULES;
            fixed.then_some(set | 1 << e.rule)
        });
        let policy = match set {
            Some(set) => self.policies.get(set, || self.policy_value(shown())),
            None => self.policy_value(shown()),
        };
        if let (Some(p), Some(l)) = (policy, limit) {
            headers.insert(RATELIMIT_POLICY, p);
            headers.insert(RATELIMIT, l);
        }
        if self.options.legacy_fields {
            headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(quota));
            headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(remaining));
            headers.insert(X_RATELIMIT_RESET, HeaderValue::from(reset));
        }
    }

    /// `pk` for `entry`'s rule, if it shows one: the first bytes of the
    /// key's digest.
    fn partition(&self, entry: &Entry) -> Option<[u8; 16]> {
        let rule = &self.rules[entry.rule].rule;
        rule.partition_key
            .then(|| digest_bytes(entry.key.as_bytes()))
    }

    /// The `RateLimit-Policy` value listing `shown`'s rules.
    fn policy_value<'e>(&self, shown: impl Iterator<Item = &'e Entry>) -> Option<HeaderValue> {
        let mut policy = String::new();
        for entry in shown {
            let compiled = &self.rules[entry.rule];
            if !policy.is_empty() {
                policy.push_str(", ");
            }
            match self.partition(entry) {
                None => policy.push_str(&compiled.policy_member),
                Some(digest) => write_policy_item(
                    &mut policy,
                    &PolicyItem {
                        name: &compiled.rule.name,
                        quota: compiled.quota,
                        window: compiled.window,
                        unit: compiled.rule.unit.as_deref(),
                        partition: Some(&digest[..8]),
                    },
                ),
            }
        }
        HeaderValue::try_from(policy).ok()
    }
}

/// A denial's wait in milliseconds, rounded up; `None` for never.
fn retry_ms(decision: &Decision) -> Option<u64> {
    decision
        .retry_after
        .as_nanos()
        .map(|ns| ns.div_ceil(1_000_000))
}

/// `t`: for a denial, when the same request would be admitted (the
/// `Retry-After`); for an admission, when the key's whole quota is back.
fn reset_secs(decision: &Decision) -> u64 {
    match decision.retry_after {
        RetryAfter::After(ns) if !decision.allowed => retry_after_secs(ns),
        _ => secs_up(decision.reset_after),
    }
}
