//! The server's metrics, through the `metrics` facade (as the HTTP layer's)
//! and rendered in Prometheus text at `/metrics`.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `tollgate_server_hits_total` | counter | `rule`: hits asked for |
//! | `tollgate_server_over_limit_total` | counter | `rule`: hits refused (shadow included) |
//! | `tollgate_server_near_limit_total` | counter | `rule`: hits admitted with under 20 % left |
//! | `tollgate_server_shadow_mode_total` | counter | `rule`: hits a shadow limit would have refused |
//! | `tollgate_server_store_errors_total` | counter | `rule` |
//! | `tollgate_server_decision_seconds` | histogram | `api` (`grpc`, `http`) |
//! | `tollgate_server_config_loads_total` | counter | `result` (`ok`, `error`) |
//! | `tollgate_server_refused_total` | counter | `reason` (listener refusals: `header_timeout`, `idle`, `headers_too_large`, `body_too_large`, `body_timeout`, `body_malformed`, `too_many_connections`; the API's `unauthorized`; the proxy's `bad_target`) |
//! | `tollgate_breaker_transitions_total` | counter | `store` (`memory`, `redis`, `postgres`), `to` (`open`, `half_open`, `closed`): the store's circuit breaker (the library's) |
//! | `tollgate_breaker_state` | gauge | `store`: 0 closed, 1 half-open, 2 open |
//!
//! `rule` is the limit's path in the configuration (`domain.key_value`);
//! with `detailed_metric: true`, the request's own values instead (a value
//! marked `secret` as its digest), for the limit's current top
//! [`DEFAULT_DETAILED_SERIES`] values (see [`bound_detailed_series`]), every
//! other hit counted under `PATH:other`: the series follow the heavy
//! hitters, withdrawn when they leave the top, their counts moved to
//! `PATH:other` (how, and why the counters stay monotonic: the `detailed`
//! module). Rendered by [`render`].
//!
//! The same decisions are also counted under envoyproxy/ratelimit's names,
//! as its Prometheus mapping (`default_mapper.yaml`, through the statsd
//! exporter) exposes them, so that its dashboards and alerts keep working:
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `ratelimit_service_rate_limit_total_hits` | counter | `domain`, `key1`, `key2` |
//! | `ratelimit_service_rate_limit_over_limit` | counter | same |
//! | `ratelimit_service_rate_limit_near_limit` | counter | same |
//! | `ratelimit_service_rate_limit_within_limit` | counter | same |
//! | `ratelimit_service_rate_limit_shadow_mode` | counter | same |
//! | `ratelimit_service_should_rate_limit_error` | counter | `err_type` (`redis_error`, for any store) |
//! | `ratelimit_service_total_requests` | counter | `grpc_method` (`ShouldRateLimit`) |
//! | `ratelimit_service_response_time_seconds` | histogram | `grpc_method` |
//! | `ratelimit_service_config_load_success`, `_error` | counter | |
//!
//! `key1` is the descriptor's first level (`key_value`, or `key` alone for
//! a key without a value, as upstream's stat names), `key2` the second,
//! absent for a one-level descriptor; deeper levels go in `key2`, joined by
//! `.` (upstream's mapping has no rule for them).

mod detailed;

use std::sync::atomic::Ordering;
use std::sync::{LazyLock, OnceLock};
use std::time::Instant;

use parking_lot::Mutex;
use tollgate::{Clock, MonotonicClock};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use self::detailed::{Counts, Detailed};
use crate::config::LimitEntry;
use crate::secret::shown_entries;

/// Hits asked for, per rule.
pub const HITS: &str = "tollgate_server_hits_total";
/// Hits refused, per rule.
pub const OVER_LIMIT: &str = "tollgate_server_over_limit_total";
/// Hits admitted near the limit, per rule.
pub const NEAR_LIMIT: &str = "tollgate_server_near_limit_total";
/// Hits a shadow rule would have refused.
pub const SHADOW: &str = "tollgate_server_shadow_mode_total";
/// Store failures, per rule.
pub const STORE_ERRORS: &str = "tollgate_server_store_errors_total";
/// Time to decide one API call.
pub const DECISION_SECONDS: &str = "tollgate_server_decision_seconds";
/// Configuration loads by result.
pub const CONFIG_LOADS: &str = "tollgate_server_config_loads_total";
/// Connections or requests refused by a listener's limits.
pub const REFUSED: &str = "tollgate_server_refused_total";

/// envoyproxy/ratelimit's per-limit counters (see the module's table).
const UPSTREAM_TOTAL_HITS: &str = "ratelimit_service_rate_limit_total_hits";
const UPSTREAM_OVER_LIMIT: &str = "ratelimit_service_rate_limit_over_limit";
const UPSTREAM_NEAR_LIMIT: &str = "ratelimit_service_rate_limit_near_limit";
const UPSTREAM_WITHIN_LIMIT: &str = "ratelimit_service_rate_limit_within_limit";
const UPSTREAM_SHADOW_MODE: &str = "ratelimit_service_rate_limit_shadow_mode";
const UPSTREAM_CALL_ERRORS: &str = "ratelimit_service_should_rate_limit_error";
const UPSTREAM_REQUESTS: &str = "ratelimit_service_total_requests";
const UPSTREAM_RESPONSE_TIME: &str = "ratelimit_service_response_time_seconds";
const UPSTREAM_LOAD_SUCCESS: &str = "ratelimit_service_config_load_success";
const UPSTREAM_LOAD_ERROR: &str = "ratelimit_service_config_load_error";

/// Latency buckets, in seconds: 10 µs to 1 s.
const BUCKETS: [f64; 11] = [
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 1e-2, 1e-1, 1.0,
];

/// The process's Prometheus recorder, installed on first use (one per
/// process: the `metrics` facade has one global recorder).
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets(&BUCKETS)
            .expect("the bucket list is not empty")
            .build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("another metrics recorder is installed; /metrics will be empty");
        }
        handle
    })
}

/// How many values of each `detailed_metric` limit get a series of their
/// own by default.
pub const DEFAULT_DETAILED_SERIES: usize = detailed::DEFAULT_SERIES;

/// The `detailed_metric` series, and the time their summaries count on.
static DETAILED: LazyLock<(Mutex<Detailed>, MonotonicClock)> =
    LazyLock::new(|| (Mutex::default(), MonotonicClock::new()));

/// Sets how many values of each `detailed_metric` limit get a series of
/// their own (the current top ones), for the whole process (the recorder
/// is the process's); every other hit is counted under `PATH:other`. A
/// limit keeps the bound it had at its first hit.
pub fn bound_detailed_series(max: usize) {
    detailed::BOUND.store(max, Ordering::Relaxed);
}

/// The Prometheus page of `/metrics`: the recorder's, with the
/// `detailed_metric` series, made to follow each limit's current top values
/// first, written into it.
pub fn render() -> String {
    let page = handle().render();
    let (table, clock) = &*DETAILED;
    let families = table.lock().scrape(clock.now());
    detailed::splice(page, families)
}

/// The metric labels of one decision: the limit's path, or with
/// `detailed_metric` the request's values (secret ones as their digest).
pub(crate) enum Label {
    /// Counted through the `metrics` facade.
    Path(String),
    /// Counted among the limit's per-value series.
    Detailed {
        /// The limit's path.
        path: String,
        /// `domain.key_value...` with the request's values.
        value: String,
    },
}

impl Label {
    pub fn new(entry: &LimitEntry, entries: &[(String, String)]) -> Self {
        if !entry.detailed_metric {
            return Label::Path(entry.path.clone());
        }
        let domain = entry.path.split('.').next().unwrap_or_default();
        let mut value = domain.to_string();
        for (k, v) in shown_entries(&entry.secret, entries).iter() {
            value.push('.');
            value.push_str(k);
            value.push('_');
            value.push_str(v);
        }
        Label::Detailed {
            path: entry.path.clone(),
            value,
        }
    }

    /// Counts into this label's per-value series, or answers the label a
    /// facade counter carries: the path, or `PATH:other` for a limit with
    /// no room for per-value series.
    fn count(&self, hits: u64, with: impl FnOnce(&mut Counts)) -> Option<String> {
        let (path, value) = match self {
            Label::Path(path) => return Some(path.clone()),
            Label::Detailed { path, value } => (path, value),
        };
        let (table, clock) = &*DETAILED;
        match table.lock().counts(clock.now(), path, value, hits) {
            Some(counts) => {
                with(counts);
                None
            }
            None => Some(format!("{path}:other")),
        }
    }

    pub fn decided(&self, hits: u64, allowed: bool, near: bool, shadow: bool) {
        let Some(rule) = self.count(hits, |c| c.decided(hits, allowed, near, shadow)) else {
            return;
        };
        let labels = upstream_labels(&rule);
        metrics::counter!(UPSTREAM_TOTAL_HITS, &labels).increment(hits);
        if !allowed {
            metrics::counter!(UPSTREAM_OVER_LIMIT, &labels).increment(hits);
            if shadow {
                metrics::counter!(UPSTREAM_SHADOW_MODE, &labels).increment(hits);
            }
        } else {
            metrics::counter!(UPSTREAM_WITHIN_LIMIT, &labels).increment(hits);
            if near {
                metrics::counter!(UPSTREAM_NEAR_LIMIT, &labels).increment(hits);
            }
        }
        metrics::counter!(HITS, "rule" => rule.clone()).increment(hits);
        if !allowed {
            metrics::counter!(OVER_LIMIT, "rule" => rule.clone()).increment(hits);
            if shadow {
                metrics::counter!(SHADOW, "rule" => rule).increment(hits);
            }
        } else if near {
            metrics::counter!(NEAR_LIMIT, "rule" => rule).increment(hits);
        }
    }

    pub fn store_error(&self) {
        metrics::counter!(UPSTREAM_CALL_ERRORS, "err_type" => "redis_error").increment(1);
        if let Some(rule) = self.count(0, |c| c.store_errors += 1) {
            metrics::counter!(STORE_ERRORS, "rule" => rule).increment(1);
        }
    }
}

/// envoyproxy/ratelimit's labels of a limit: its stat key
/// `domain.key1[.key2…]` split at the dots.
fn upstream_labels(rule: &str) -> Vec<(&'static str, String)> {
    let mut parts = rule.splitn(3, '.');
    let mut labels = vec![
        ("domain", parts.next().unwrap_or_default().to_string()),
        ("key1", parts.next().unwrap_or_default().to_string()),
    ];
    if let Some(rest) = parts.next() {
        labels.push(("key2", rest.to_string()));
    }
    labels
}

/// Records one API call's decision time.
pub(crate) fn decision_time(api: &'static str, started: Instant) {
    let seconds = started.elapsed().as_secs_f64();
    metrics::histogram!(DECISION_SECONDS, "api" => api).record(seconds);
    if api == "grpc" {
        let method = [("grpc_method", "ShouldRateLimit")];
        metrics::counter!(UPSTREAM_REQUESTS, &method).increment(1);
        metrics::histogram!(UPSTREAM_RESPONSE_TIME, &method).record(seconds);
    }
}

/// Counts a configuration load.
pub(crate) fn config_load(ok: bool) {
    let result = if ok { "ok" } else { "error" };
    metrics::counter!(CONFIG_LOADS, "result" => result).increment(1);
    metrics::counter!(if ok {
        UPSTREAM_LOAD_SUCCESS
    } else {
        UPSTREAM_LOAD_ERROR
    })
    .increment(1);
}

/// Counts a listener refusal.
pub(crate) fn refused(reason: &'static str) {
    metrics::counter!(REFUSED, "reason" => reason).increment(1);
}
