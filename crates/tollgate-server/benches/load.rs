//! Load against the server on 127.0.0.1, each against a do-nothing peer
//! speaking the same protocol.
//!
//! - `cargo bench -p tollgate-server --bench load -- grpc SECONDS [STORE]`:
//!   64 concurrent `ShouldRateLimit` calls over 4 HTTP/2 connections,
//!   tollgate (`memory` store by default, or a `redis://` URL) then a
//!   do-nothing tonic server; throughput, p50, p99.
//! - `cargo bench -p tollgate-server --bench load -- null PORT`: a
//!   do-nothing axum `/v1/check` until killed, the peer of tollgate's HTTP
//!   API (which `benches/serve.sh` runs as `tollgate serve`) under wrk.
//! - `cargo bench -p tollgate-server --bench load -- upstream PORT`: a tiny
//!   HTTP/1.1 service answering `hello` to everything, the upstream of the
//!   proxy benchmark (`benches/serve.sh`).
//! - `cargo bench -p tollgate-server --bench load -- floor PORT UPSTREAM
//!   [WORKERS]`: the least a reverse proxy on hyper does (`load/floor.rs`),
//!   the floor under the proxy in `benches/proxy-ab.sh` (`FLOOR=N`).
//!
//! `benches/serve.sh` runs them all, with nginx and wrk (docs/PERFORMANCE.md).

#[path = "load/floor.rs"]
mod floor;

// The `tollgate` binary's allocator, so that the floor and the do-nothing
// peers allocate as the server they are compared with does. (Its unit
// tests come along, unused: this bench has no test harness.)
#[allow(dead_code)]
#[path = "../../tollgate-cli/src/allocator.rs"]
mod allocator;
#[global_allocator]
static ALLOCATOR: allocator::MiMalloc = allocator::MiMalloc;

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tollgate_server::listener::ListenerLimits;
use tollgate_server::server::{self, ServeOptions};
use tonic::{Request, Response, Status};

const CONFIG: &str = "
domain: bench
descriptors:
  - key: user
    rate_limit: { algorithm: gcra, unit: second, requests_per_unit: 1000000000 }
";

/// Answers OK to everything: the cost of tonic and the proto alone.
struct Nothing;

#[tonic::async_trait]
impl RateLimitService for Nothing {
    async fn should_rate_limit(
        &self,
        _: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        Ok(Response::new(RateLimitResponse {
            overall_code: 1,
            ..RateLimitResponse::default()
        }))
    }
}

/// The gRPC API alone, on one worker: the bench's own runtime, which the
/// do-nothing peer shares too.
fn options(dir: &std::path::Path, store: &str) -> ServeOptions {
    let path = dir.join("bench.yaml");
    std::fs::write(&path, CONFIG).expect("the temp dir is writable");
    ServeOptions {
        config: Some(path),
        directory: Default::default(),
        watch: false,
        store: store.into(),
        prefix: format!("tollgate-bench:{}:", std::process::id()),
        store_timeout: tollgate_server::store::DEFAULT_STORE_TIMEOUT,
        memory: tollgate_server::store::MemorySettings::default(),
        top: tollgate_server::top_shape::TopSettings::default(),
        http_token: None,
        grpc: Some("127.0.0.1:0".parse().expect("an address")),
        http: None,
        limits: ListenerLimits::default(),
        health: Default::default(),
        metrics: None,
        proxy: None,
        workers: 1,
        answers: Default::default(),
    }
}

async fn drive(url: String, seconds: u64) -> (f64, Duration, Duration) {
    let mut channels = Vec::new();
    for _ in 0..4 {
        channels.push(
            RateLimitServiceClient::connect(url.clone())
                .await
                .expect("connects"),
        );
    }
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for i in 0..64 {
        let mut client = channels[i % 4].clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut n = 0u64;
            while Instant::now() < end {
                n += 1;
                let request = RateLimitRequest {
                    domain: "bench".into(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: vec![Entry {
                            key: "user".into(),
                            value: format!("u{}", n % 1000),
                        }],
                        ..RateLimitDescriptor::default()
                    }],
                    hits_addend: 1,
                };
                let started = Instant::now();
                client.should_rate_limit(request).await.expect("answers");
                latencies.push(started.elapsed());
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("the task finishes"));
    }
    all.sort();
    let pct = |p: usize| all[(all.len() * p / 100).min(all.len() - 1)];
    (all.len() as f64 / seconds as f64, pct(50), pct(99))
}

async fn grpc(seconds: u64, store: &str) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let running = server::start(options(dir.path(), store))
        .await
        .expect("starts");
    let url = format!("http://{}", running.grpc.expect("gRPC is served"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let null_url = format!("http://{}", listener.local_addr().expect("an address"));
    // TCP_NODELAY as tollgate's listener sets it: without it the peer's
    // answers wait for delayed ACKs (a p99 of about 40 ms), which flatters
    // tollgate's ratio.
    let incoming = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::TcpListenerStream::new(listener),
        |conn| {
            if let Ok(stream) = &conn {
                let _ = stream.set_nodelay(true);
            }
            conn
        },
    );
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(Nothing))
            .serve_with_incoming(incoming),
    );
    let (t, p50, p99) = drive(url, seconds).await;
    println!("tollgate gRPC ({store}): {t:.0} req/s, p50 {p50:?}, p99 {p99:?}");
    let (n, q50, q99) = drive(null_url, seconds).await;
    println!("do-nothing tonic:       {n:.0} req/s, p50 {q50:?}, p99 {q99:?}");
    println!("ratio: {:.2}x", t / n);
    running.shutdown().await;
}

/// `POST /v1/check` answering OK to everything, in axum's usual setup (a
/// multi-threaded runtime): the peer of tollgate's HTTP API.
async fn null(port: u16) {
    let app = axum::Router::new().route(
        "/v1/check",
        axum::routing::post(|_: axum::body::Bytes| async {
            axum::Json(serde_json::json!({"overall_code": "OK"}))
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("binds");
    println!("ready: do-nothing axum on {port}");
    let _ = axum::serve(listener, app).await;
}

/// The proxy benchmark's upstream: `hello` to every request, keep-alive,
/// with as little work as hyper allows.
async fn upstream(port: u16) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("binds");
    println!("ready: upstream on {port}");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let hello = hyper::service::service_fn(|_| async {
            Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Full::new(
                bytes::Bytes::from_static(b"hello"),
            )))
        });
        tokio::spawn(
            hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), hello),
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let arg = |i: usize| args.get(i).map(String::as_str);
    match arg(0) {
        Some("null") => {
            let port = arg(1).and_then(|p| p.parse().ok()).unwrap_or(18090);
            runtime.block_on(null(port));
        }
        Some("grpc") => {
            let seconds = arg(1).and_then(|s| s.parse().ok()).unwrap_or(5);
            runtime.block_on(grpc(seconds, arg(2).unwrap_or("memory")));
        }
        Some("upstream") => {
            let port = arg(1).and_then(|p| p.parse().ok()).unwrap_or(18070);
            runtime.block_on(upstream(port));
        }
        Some("floor") => {
            let port = |i| arg(i).and_then(|p| p.parse().ok());
            let (Some(listen), Some(upstream)) = (port(1), port(2)) else {
                println!("usage: load floor PORT UPSTREAM_PORT [WORKERS]");
                return;
            };
            let workers = arg(3).and_then(|w| w.parse().ok()).unwrap_or(2);
            floor::run(listen, upstream, workers);
        }
        // `cargo test --benches` and plain `cargo bench` run nothing long.
        _ => {
            println!("usage: load grpc [SECONDS] [STORE] | load null [PORT] | load upstream [PORT] | load floor PORT UPSTREAM_PORT [WORKERS]")
        }
    }
}
