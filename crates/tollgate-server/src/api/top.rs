//! `GET /v1/top`: each limit's heaviest keys over the last minute and ten
//! minutes (the HTTP layer's JSON, [`tollgate_http::top`]), by limit path
//! (and the reverse proxy's HTTP rules, by name), each compared with the
//! limit the configuration in force gives it.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use tollgate::{Backend, Limit};
use tollgate_http::top::{json_response, keys_asked, top_json, TopRule};

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
    json_response(StatusCode::OK, top_json(rules, engine.top_now(), n)).into_response()
}
