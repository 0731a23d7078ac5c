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
//! | `tollgate_server_refused_total` | counter | `reason` (listener refusals: `header_timeout`, `idle`, `headers_too_large`, `body_too_large`, `too_many_connections`) |
//! | `tollgate_breaker_transitions_total` | counter | `store` (`memory`, `redis`, `postgres`), `to` (`open`, `half_open`, `closed`): the store's circuit breaker (the library's) |
//! | `tollgate_breaker_state` | gauge | `store`: 0 closed, 1 half-open, 2 open |
//!
//! `rule` is the limit's path in the configuration (`domain.key_value`);
//! with `detailed_metric: true`, the request's own values instead.

use std::sync::OnceLock;
use std::time::Instant;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::config::LimitEntry;

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

/// The metric labels of one decision.
pub(crate) struct Label(String);

impl Label {
    pub fn new(entry: &LimitEntry, entries: &[(String, String)]) -> Self {
        if !entry.detailed_metric {
            return Label(entry.path.clone());
        }
        let domain = entry.path.split('.').next().unwrap_or_default();
        let mut detailed = domain.to_string();
        for (k, v) in entries {
            detailed.push('.');
            detailed.push_str(k);
            detailed.push('_');
            detailed.push_str(v);
        }
        Label(detailed)
    }

    pub fn decided(&self, hits: u64, allowed: bool, near: bool, shadow: bool) {
        let rule = self.0.clone();
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
        metrics::counter!(STORE_ERRORS, "rule" => self.0.clone()).increment(1);
    }
}

/// Records one API call's decision time.
pub(crate) fn decision_time(api: &'static str, started: Instant) {
    metrics::histogram!(DECISION_SECONDS, "api" => api).record(started.elapsed().as_secs_f64());
}

/// Counts a configuration load.
pub(crate) fn config_load(ok: bool) {
    let result = if ok { "ok" } else { "error" };
    metrics::counter!(CONFIG_LOADS, "result" => result).increment(1);
}

/// Counts a listener refusal.
pub(crate) fn refused(reason: &'static str) {
    metrics::counter!(REFUSED, "reason" => reason).increment(1);
}
