//! An API gateway with three layered limits, in process memory:
//!
//! - `per-ip`: every request, 120 a minute per client address (GCRA);
//! - `per-key`: `/v1/*`, 60 a minute per API key (token bucket, burst 10),
//!   the key read from `x-api-key` and stored hashed;
//! - `per-tenant`: `POST /v1/chat`, 20,000 tokens a minute per tenant (the
//!   tenant found by the auth layer from the API key), charged the request's
//!   `max_tokens` up front and settled with the tokens the answer really
//!   used: the difference refunded, or the extra forced (the tenant then
//!   waits until the debt is repaid).
//!
//! Run it with `cargo run -p tollgate-http --example gateway`, then:
//!
//! ```sh
//! curl -i localhost:3000/v1/models -H 'x-api-key: key-acme'
//! curl -i -X POST 'localhost:3000/v1/chat?max_tokens=4000' -H 'x-api-key: key-acme'
//! curl -i -X POST localhost:3000/admin/shadow-all   # kill switch: every rule to shadow
//! ```
//!
//! Set `PORT` to listen elsewhere than 3000.

use std::net::SocketAddr;

use axum::extract::{Query, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use tollgate::{Algorithm, Limit, MemoryBackend, Quota};
use tollgate_http::{
    Cost, CostError, Key, KillSwitch, Labels, Matcher, RateLimit, Reconcile, ReportedCost, Rule,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let per_ip = Rule::new(
        "per-ip",
        Limit::new(Algorithm::Gcra, Quota::per_minute(120)?),
    );
    let per_key = Rule::new(
        "per-key",
        Limit::new(
            Algorithm::TokenBucket,
            Quota::per_minute(60)?.with_burst(10)?,
        ),
    )
    .matcher(Matcher::any().path_prefix("/v1"))
    .key(Key::header("x-api-key"));
    let per_tenant = Rule::new(
        "per-tenant",
        Limit::new(Algorithm::TokenBucket, Quota::per_minute(20_000)?),
    )
    .matcher(Matcher::any().methods(["POST"]).route("/v1/chat"))
    .key(Key::label("tenant"))
    .cost(Cost::with(|view| {
        // The most the answer may use: the request's `max_tokens`.
        max_tokens(view.query.unwrap_or("")).map_err(CostError::Refused)
    }))
    .reconcile(Reconcile::Extension)
    .unit("tokens");

    let limit = RateLimit::builder(MemoryBackend::new())
        .rule(per_ip)
        .rule(per_key)
        .rule(per_tenant)
        .build()?;
    let switch = limit.kill_switch();

    let app = Router::new()
        .route("/v1/models", get(|| async { "[\"tiny\"]" }))
        .route("/v1/chat", post(chat))
        .route("/admin/shadow-all", post(shadow_all))
        .layer(limit)
        // Runs first: finds the tenant, as a real auth layer would.
        .layer(middleware::from_fn(auth))
        .with_state(switch);

    let port = std::env::var("PORT").unwrap_or_else(|_| "3000".into());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}

/// The tenant of each API key (a database in a real service).
async fn auth(mut request: Request, next: Next) -> Response {
    let tenant = match request.headers().get("x-api-key").map(|v| v.as_bytes()) {
        Some(b"key-acme") | Some(b"key-acme-2") => Some("acme"),
        Some(b"key-globex") => Some("globex"),
        _ => None,
    };
    if let Some(tenant) = tenant {
        request
            .extensions_mut()
            .insert(Labels::new().with("tenant", tenant));
    }
    next.run(request).await
}

fn max_tokens(query: &str) -> Result<u64, String> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("max_tokens="))
        .map_or(Ok(1000), |n| {
            n.parse()
                .map_err(|_| "max_tokens must be a whole number".to_string())
        })
}

#[derive(Deserialize)]
struct ChatParams {
    max_tokens: Option<u64>,
}

/// A stand-in model: uses a third of what it may.
async fn chat(Query(params): Query<ChatParams>) -> Response {
    let used = params.max_tokens.unwrap_or(1000) / 3;
    let mut response = format!("{{\"usage\":{{\"output_tokens\":{used}}}}}").into_response();
    response.extensions_mut().insert(ReportedCost(used));
    response
}

async fn shadow_all(State(switch): State<KillSwitch>) -> &'static str {
    switch.shadow_all(!switch.is_shadow_all());
    if switch.is_shadow_all() {
        "every rule is in shadow now\n"
    } else {
        "rules enforce again\n"
    }
}
