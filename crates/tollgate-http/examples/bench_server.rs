//! The server behind the end-to-end overhead figures in docs/PERFORMANCE.md:
//! one trivial axum route, bare or behind a limiter, on 127.0.0.1.
//!
//! ```sh
//! cargo run --release -p tollgate-http --example bench_server -- MODE admit|refuse [PORT]
//! wrk -t2 -c64 -d10s --latency -s crates/tollgate-http/benches/wrk-keys.lua http://127.0.0.1:8080/v1/items
//! ```
//!
//! MODE: `bare`; `one` (per client address), `one-quiet` (the same without
//! the RateLimit fields on admitted responses), `one-unsummed` (the same
//! without the heavy-hitter summary), `three` (plus per API key and per API
//! key and endpoint), `three-unsummed` or `redis` (`one` over a Redis it starts on a
//! free port), all tollgate-http; `governor` (tower_governor keyed by address).
//! `admit` gives every key far more than it asks for; `refuse` one request
//! an hour, so after a key's first request every one is refused.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use tollgate::{Backend, MemoryBackend};
use tollgate_http::{ClientIp, ForwardedHeader, RateLimit};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::SmartIpKeyExtractor;
use tower_governor::GovernorLayer;

#[path = "../benches/bench_rules.rs"]
mod bench_rules;

/// `rules` of the shared set; `fields`: RateLimit fields on admitted responses.
fn layer<B: Backend>(
    backend: B,
    rules: usize,
    refuse: bool,
    fields: bool,
    summaries: bool,
) -> RateLimit<B> {
    let trusted = ClientIp::behind(
        ["127.0.0.0/8".parse().unwrap()],
        ForwardedHeader::XForwardedFor,
    );
    let mut builder = RateLimit::builder(backend)
        .client_ip(trusted)
        .admitted_fields(fields)
        .summaries(summaries);
    for rule in bench_rules::rules(refuse).into_iter().take(rules) {
        builder = builder.rule(rule);
    }
    builder.build().unwrap()
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, refuse) = match args.as_slice() {
        [mode, how, ..] if how == "admit" || how == "refuse" => (mode.as_str(), how == "refuse"),
        _ => {
            eprintln!(
                "usage: bench_server bare|one|one-quiet|one-unsummed|three|three-unsummed|redis|governor admit|refuse [PORT]"
            );
            std::process::exit(2);
        }
    };
    let port = args.get(2).map_or("8080", String::as_str);
    let app = Router::new().route("/v1/items", get(|| async { "ok" }));
    let mut redis = None;
    let app = match mode {
        "bare" => app,
        "one" => app.layer(layer(MemoryBackend::new(), 1, refuse, true, true)),
        "one-quiet" => app.layer(layer(MemoryBackend::new(), 1, refuse, false, true)),
        "one-unsummed" => app.layer(layer(MemoryBackend::new(), 1, refuse, true, false)),
        "three" => app.layer(layer(MemoryBackend::new(), 3, refuse, true, true)),
        "three-unsummed" => app.layer(layer(MemoryBackend::new(), 3, refuse, true, false)),
        "redis" => {
            let server = tollgate_redis::harness::RedisServer::start().expect("redis-server");
            let backend = tollgate_redis::RedisBackend::connect(&server.url())
                .await
                .unwrap();
            redis = Some(server);
            app.layer(layer(backend, 1, refuse, true, true))
        }
        "governor" => {
            let mut config = GovernorConfigBuilder::default().key_extractor(SmartIpKeyExtractor);
            if refuse {
                config.period(Duration::from_secs(3600)).burst_size(1);
            } else {
                config
                    .period(Duration::from_micros(1))
                    .burst_size(1_000_000);
            }
            app.layer(GovernorLayer {
                config: Arc::new(config.finish().unwrap()),
            })
        }
        other => panic!("unknown mode {other}"),
    };
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}"))
        .await
        .unwrap();
    println!(
        "ready: {mode} {} on {}",
        if refuse { "refuse" } else { "admit" },
        listener.local_addr().unwrap()
    );
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
    .unwrap();
    drop(redis);
}
