//! `GET /v1/top`: each limit's heaviest keys over the last minute and ten
//! minutes (the HTTP layer's JSON, [`tollgate_http::top`]), by limit path
//! (and the reverse proxy's HTTP rules, by name), each compared with the
//! limit the configuration in force gives it; with the store's state and
//! the configuration's source and load time, for the live page (`/top`).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tollgate::{Backend, BreakerState, Limit};
use tollgate_http::top::{json_response, keys_asked, top_value, TopRule};

use crate::config::{Config, StoreErrorMode};
use crate::engine::{single_limit, Engine};

pub(super) async fn top<B: Backend + 'static>(
    State(engine): State<Arc<Engine<B>>>,
    uri: Uri,
) -> Response {
    let top = engine.top();
    let n = match keys_asked(uri.query(), top.config().capacity()) {
        Ok(n) => n,
        Err(message) => return super::error(StatusCode::BAD_REQUEST, message, Some("n".into())),
    };
    let config = engine.config();
    let limits: HashMap<&str, Limit> = config
        .entries()
        .iter()
        .filter_map(|e| Some((e.path.as_str(), single_limit(&e.action)?)))
        .chain(
            config
                .http_rules()
                .iter()
                .filter_map(|r| Some((r.name(), *r.policy().limits().first()?))),
        )
        .collect();
    let rules = top.rules();
    let rules = rules.iter().map(|(name, summary)| TopRule {
        name,
        limit: limits.get(&**name).copied(),
        summary,
    });
    let mut body = top_value(rules, engine.top_now(), n);
    body["config"] = json!({
        "source": engine.provenance().map(|p| p.config_source.as_str()),
        "loaded_at_s": engine.loaded_at_s(),
        "limits": config.entries().len(),
        "http_rules": config.http_rules().len(),
    });
    if let Some(provenance) = engine.provenance() {
        let breaker = provenance.health.breaker_state();
        body["store"] = json!({
            "url": provenance.store_url,
            "state": match breaker {
                BreakerState::Closed => "healthy",
                BreakerState::Open => "breaker open",
                BreakerState::HalfOpen => "breaker half-open",
            },
            "breaker": breaker.as_str(),
            "fallback_in_use": breaker != BreakerState::Closed && falls_back(&config),
        });
    }
    json_response(StatusCode::OK, body.to_string()).into_response()
}

/// Whether some limit or HTTP rule answers from the in-process fallback
/// when the store fails.
fn falls_back(config: &Config) -> bool {
    config
        .entries()
        .iter()
        .any(|e| e.on_store_error == StoreErrorMode::Fallback)
        || (0..config.http_rules().len()).any(|i| config.http_rule_falls_back(i))
}
