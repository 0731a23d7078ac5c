//! [`Rule`]: a name, a matcher, a key, a cost, a policy, a mode and what to
//! do when the store fails.
//!
//! ```
//! use tollgate::{Algorithm, Limit, Quota};
//! use tollgate_http::{Key, Matcher, Rule};
//!
//! let per_ip = Rule::new("per-ip", Limit::new(Algorithm::Gcra, Quota::per_second(50).unwrap()))
//!     .key(Key::ip());
//! let per_key = Rule::new("per-key", Limit::new(Algorithm::TokenBucket, Quota::per_minute(600).unwrap()))
//!     .matcher(Matcher::any().path_prefix("/v1"))
//!     .key(Key::header("x-api-key"))
//!     .shadow() // count and log what it would deny, deny nothing
//!     .fail_closed();
//! # let _ = (per_ip, per_key);
//! ```

use std::fmt;
use std::sync::Arc;

use serde::Deserialize;
use tollgate::{BackendError, Decision, Policy};

use crate::view::Reads;
use crate::{ClientIp, Cost, Key, Matcher, Reconcile};

/// Whether a rule's denials are enforced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Denials are answered.
    #[default]
    Enforce,
    /// Decide, charge, count and log, but never deny or delay (a dark
    /// launch): what the rule would do shows in the metrics and logs.
    Shadow,
}

/// What a rule does when its store cannot decide.
#[derive(Clone, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnStoreError {
    /// The request passes; the failure is counted and logged.
    #[default]
    Open,
    /// The request is answered `503` with a `Retry-After` (never 429: the
    /// client did nothing wrong).
    Closed,
    /// Someone else decides: the seam for a local fallback limiter.
    #[serde(skip)]
    With(Arc<dyn StoreFailure>),
}

impl fmt::Debug for OnStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OnStoreError::Open => f.write_str("Open"),
            OnStoreError::Closed => f.write_str("Closed"),
            OnStoreError::With(_) => f.write_str("With(..)"),
        }
    }
}

/// Decides a request whose store failed, for example from a local limiter
/// holding this instance's share of the budget.
pub trait StoreFailure: Send + Sync {
    /// The verdict for `key` charged `cost` under `rule` after `error`.
    fn on_failure(&self, rule: &str, key: &str, cost: u64, error: &BackendError) -> Fallback;
}

/// A [`StoreFailure`]'s verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// As [`OnStoreError::Open`].
    Open,
    /// As [`OnStoreError::Closed`].
    Closed,
    /// This decision stands in for the store's. Whatever it charged lives
    /// outside the store, so the layer does not refund it.
    Decided(Decision),
}

/// What to do when a rule's key is missing from the request (no such header
/// or label, and no fallback part).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissingKey {
    /// Answer `400`.
    #[default]
    Refuse,
    /// The rule does not apply to this request.
    Skip,
}

/// One rate limit on the requests its matcher selects.
#[derive(Clone, Debug)]
pub struct Rule {
    pub(crate) name: Arc<str>,
    pub(crate) matcher: Matcher,
    pub(crate) key: Key,
    /// How this rule finds the client's address, if not as the layer does.
    pub(crate) client_ip: Option<ClientIp>,
    pub(crate) cost: Cost,
    /// The least a cost the client chooses may be (at least 1).
    pub(crate) min_cost: u64,
    pub(crate) policy: Policy,
    pub(crate) mode: Mode,
    pub(crate) on_store_error: OnStoreError,
    pub(crate) on_missing_key: MissingKey,
    pub(crate) reconcile: Option<Reconcile>,
    pub(crate) unit: Option<String>,
    pub(crate) partition_key: bool,
}

impl Rule {
    /// The view's optional parts deciding this rule reads.
    pub(crate) fn reads(&self) -> Reads {
        self.matcher
            .reads()
            .and(self.key.reads())
            .and(self.cost.reads())
    }

    /// A rule called `name` (printable ASCII, unique in its layer) enforcing
    /// `policy` on every request, keyed by the client's address, cost 1,
    /// failing open.
    pub fn new(name: impl Into<String>, policy: impl Into<Policy>) -> Self {
        Rule {
            name: name.into().into(),
            matcher: Matcher::any(),
            key: Key::ip(),
            client_ip: None,
            cost: Cost::default(),
            min_cost: 1,
            policy: policy.into(),
            mode: Mode::Enforce,
            on_store_error: OnStoreError::Open,
            on_missing_key: MissingKey::Refuse,
            reconcile: None,
            unit: None,
            partition_key: false,
        }
    }

    /// Only requests `matcher` selects.
    pub fn matcher(mut self, matcher: Matcher) -> Self {
        self.matcher = matcher;
        self
    }

    /// Whose budget a request spends.
    pub fn key(mut self, key: Key) -> Self {
        self.key = key;
        self
    }

    /// How this rule finds the client's address for [`Key::Ip`], instead of
    /// the layer's [`RateLimitBuilder::client_ip`](crate::RateLimitBuilder::client_ip):
    /// for a path only reached through another load balancer.
    pub fn client_ip(mut self, client_ip: ClientIp) -> Self {
        self.client_ip = Some(client_ip);
        self
    }

    /// What to do when the key is missing.
    pub fn on_missing_key(mut self, missing: MissingKey) -> Self {
        self.on_missing_key = missing;
        self
    }

    /// What a request costs (up front, when reconciled).
    pub fn cost(mut self, cost: Cost) -> Self {
        self.cost = cost;
        self
    }

    /// The least a request costs when the client chooses its cost (a
    /// [`Cost::Header`], [`Cost::ContentLength`] or [`Cost::With`]); 1 by
    /// default, and 0 counts as 1, so `x-cost: 0` or an empty body is never
    /// a free pass. A [`Cost::Constant`] is the operator's and stands as
    /// written.
    pub fn min_cost(mut self, min: u64) -> Self {
        self.min_cost = min.max(1);
        self
    }

    /// Settle the up-front cost with the one the response reports.
    pub fn reconcile(mut self, reconcile: Reconcile) -> Self {
        self.reconcile = Some(reconcile);
        self
    }

    /// Enforce or shadow.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Shorthand for `mode(Mode::Shadow)`.
    pub fn shadow(self) -> Self {
        self.mode(Mode::Shadow)
    }

    /// What to do when the store fails.
    pub fn on_store_error(mut self, on_error: OnStoreError) -> Self {
        self.on_store_error = on_error;
        self
    }

    /// Shorthand for `on_store_error(OnStoreError::Closed)`.
    pub fn fail_closed(self) -> Self {
        self.on_store_error(OnStoreError::Closed)
    }

    /// The unit advertised as `qu` in `RateLimit-Policy` (`"tokens"`,
    /// `"content-bytes"`); requests when unset.
    pub fn unit(mut self, unit: impl Into<String>) -> Self {
        self.unit = Some(unit.into());
        self
    }

    /// Advertise `pk` (the first 8 bytes of the key's digest, never the key)
    /// so a client holding several keys can tell their numbers apart.
    pub fn partition_key(mut self, on: bool) -> Self {
        self.partition_key = on;
        self
    }

    /// The rule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The rule's policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Which requests the rule applies to, for offline readers of access
    /// logs that decide as the layer would.
    pub fn match_spec(&self) -> &Matcher {
        &self.matcher
    }

    /// Where the rule's key comes from.
    pub fn key_spec(&self) -> &Key {
        &self.key
    }

    /// What a request costs under the rule.
    pub fn cost_spec(&self) -> &Cost {
        &self.cost
    }

    /// The least a client-chosen cost may be (see [`Rule::min_cost`]).
    pub fn min_cost_spec(&self) -> u64 {
        self.min_cost
    }

    /// What the rule does when the key is missing.
    pub fn missing_key(&self) -> MissingKey {
        self.on_missing_key
    }
}

#[cfg(test)]
mod tests {
    use tollgate::{Algorithm, Limit, Quota};

    use super::*;
    use crate::CostError;

    fn rule() -> Rule {
        Rule::new(
            "r",
            Limit::new(Algorithm::Gcra, Quota::per_second(1).unwrap()),
        )
    }

    // The layer looks up only what its rules read: a part a rule reads
    // must be named here, or the rule would see it missing.
    #[test]
    fn a_rule_reads_what_its_matcher_key_and_cost_read() {
        assert_eq!(rule().reads(), Reads::default());
        let keyed = rule().key(Key::all([
            Key::ip(),
            Key::first_of([Key::Route, Key::label("user")]),
        ]));
        let reads = keyed.reads();
        assert!(reads.route && reads.labels && !reads.host);
        assert!(rule().key(Key::Host).reads().host);
        let matched = rule().matcher(Matcher::any().host("*.example.com").route("/v1/{id}"));
        let reads = matched.reads();
        assert!(reads.host && reads.route && !reads.labels);
        let costed = rule().cost(Cost::with(|_| Err(CostError::Refused("no".into()))));
        assert_eq!(costed.reads(), Reads::ALL);
    }
}
