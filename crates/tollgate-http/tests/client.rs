//! The client layer against a real axum server on 127.0.0.1 protected by
//! tollgate's own server layer.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::{routing::get, Router};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tollgate::{Algorithm, Limit, MemoryBackend, Quota};
use tollgate_http::client::{Budget, Outbound, OutboundLayer, OutboundMiddleware, Retry};
use tollgate_http::{RateLimit, Rule};
use tower::{Service, ServiceBuilder, ServiceExt};

/// A server admitting `per_second` requests a second per client address,
/// counting every request that reaches it (refused or not).
async fn limited_server(per_second: u64, hits: Arc<AtomicU64>) -> std::net::SocketAddr {
    let rule = Rule::new(
        "per-ip",
        Limit::new(Algorithm::Gcra, Quota::per_second(per_second).unwrap()),
    );
    let limit = RateLimit::builder(MemoryBackend::new())
        .rule(rule)
        .build()
        .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }).post(|| async { "ok" }))
        .layer(limit);
    support::serve(count(app, hits)).await
}

/// A server that answers every request with 503 (overloaded, no
/// `Retry-After`), behind the same layer.
async fn refusing_server(hits: Arc<AtomicU64>) -> std::net::SocketAddr {
    let refuse = || async { StatusCode::SERVICE_UNAVAILABLE };
    let rule = Rule::new(
        "per-ip",
        Limit::new(Algorithm::Gcra, Quota::per_second(10_000).unwrap()),
    );
    let limit = RateLimit::builder(MemoryBackend::new())
        .rule(rule)
        .build()
        .unwrap();
    let app = Router::new()
        .route("/", get(refuse).post(refuse))
        .layer(limit);
    support::serve(count(app, hits)).await
}

fn count(app: Router, hits: Arc<AtomicU64>) -> Router {
    app.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            hits.fetch_add(1, Ordering::SeqCst);
            next.run(request)
        },
    ))
}

#[tokio::test]
async fn a_client_at_twice_the_limit_learns_and_stays_under_it() {
    let hits = Arc::new(AtomicU64::new(0));
    let addr = limited_server(20, hits.clone()).await;
    // The client believes it may send 40 a second: twice the server's limit.
    let optimistic = Limit::new(Algorithm::Gcra, Quota::per_second(40).unwrap());
    let layer = OutboundLayer::new(Outbound::new(optimistic).unwrap());
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut service = ServiceBuilder::new().layer(layer).service(client);

    let requests = 60;
    let start = Instant::now();
    let mut ok = 0;
    for _ in 0..requests {
        let request = Request::get(format!("http://{addr}/"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        let response = service.ready().await.unwrap().call(request).await.unwrap();
        ok += u64::from(response.status() == StatusCode::OK);
    }
    let refused = hits.load(Ordering::SeqCst) - ok;
    let goodput = ok as f64 / start.elapsed().as_secs_f64();
    eprintln!("{ok} admitted, {refused} refused, goodput {goodput:.1}/s for a limit of 20/s");
    assert_eq!(ok, requests, "every request got through in the end");
    assert!(refused <= 3, "{refused} refusals: the client did not learn");
}

#[tokio::test]
async fn a_post_without_an_idempotency_key_is_never_retried() {
    let hits = Arc::new(AtomicU64::new(0));
    let addr = refusing_server(hits.clone()).await;
    let fast = Retry {
        base: Duration::from_millis(1),
        cap: Duration::from_millis(5),
        ..Retry::default()
    };
    let limit = Limit::new(Algorithm::Gcra, Quota::per_second(1000).unwrap());
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(OutboundMiddleware::new(
            Outbound::new(limit).unwrap().retry(fast),
        ))
        .build();
    let url = format!("http://{addr}/");
    let post = client.request(Method::POST, &url).send().await.unwrap();
    assert_eq!(post.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "POST without a key went once"
    );

    let get = client.get(&url).send().await.unwrap();
    assert_eq!(get.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1 + u64::from(fast.max_attempts),
        "GET was retried"
    );

    let keyed = client
        .post(&url)
        .header("idempotency-key", "order-17")
        .send()
        .await
        .unwrap();
    assert_eq!(keyed.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1 + 2 * u64::from(fast.max_attempts),
        "a POST with a key was retried"
    );
}

#[tokio::test]
async fn the_retry_budget_holds_against_a_server_refusing_everything() {
    let hits = Arc::new(AtomicU64::new(0));
    let addr = refusing_server(hits.clone()).await;
    let budget = Budget {
        percent: 10,
        burst: 5,
        per_second: 1,
    };
    let fast = Retry {
        base: Duration::from_millis(1),
        cap: Duration::from_millis(5),
        ..Retry::default()
    };
    let limit = Limit::new(Algorithm::Gcra, Quota::per_second(1000).unwrap());
    let outbound = Outbound::new(limit)
        .unwrap()
        .retry(fast)
        .budget(budget)
        .unwrap();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(OutboundMiddleware::new(outbound))
        .build();
    let url = format!("http://{addr}/");
    let requests = 200;
    let start = Instant::now();
    for _ in 0..requests {
        let answer = client.get(&url).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    let seconds = start.elapsed().as_secs() + 1;
    let retries = hits.load(Ordering::SeqCst) - requests;
    let bound = budget.burst + budget.per_second * seconds + requests * budget.percent / 100;
    eprintln!("{retries} retries for {requests} requests in {seconds} s (bound {bound})");
    assert!(retries <= bound, "{retries} retries > {bound}");
}
