//! Every kind of answer the layer gives, pinned byte for byte: status, each
//! header line in order and the body, through an axum router in process.
//! Whatever is changed inside the layer for speed, a client must see exactly
//! these bytes.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::routing::{get, post};
use axum::Router;
use http::Request;
use http_body_util::BodyExt;
use tollgate::{Algorithm, FakeClock, Limit, MemoryBackend, Quota};
use tollgate_http::{Cost, Key, Matcher, PeerAddr, RateLimit, Rule};
use tower::ServiceExt;

/// An answer as text: the status line, each header as sent, a blank line and
/// the body.
async fn render(app: &Router, request: Request<Body>) -> String {
    let response = app.clone().oneshot(request).await.unwrap();
    let mut out = format!("{}\n", response.status().as_u16());
    for (name, value) in response.headers() {
        out.push_str(&format!("{name}: {}\n", value.to_str().unwrap()));
    }
    let body = response.into_body().collect().await.unwrap().to_bytes();
    out.push('\n');
    out.push_str(std::str::from_utf8(&body).unwrap());
    out
}

fn request(method: &str, path: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut request = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut request = request.body(Body::empty()).unwrap();
    let peer: SocketAddr = "192.0.2.7:40000".parse().unwrap();
    request.extensions_mut().insert(PeerAddr(peer));
    request
}

fn quota(per_minute: u64, burst: u64) -> Quota {
    Quota::per_minute(per_minute)
        .unwrap()
        .with_burst(burst)
        .unwrap()
}

/// Three layered rules with every field option: per address (GCRA), per API
/// key on `/v1` with a unit and a partition key (token bucket, cost from a
/// header), and a shadow rule; legacy fields on.
fn app(clock: &FakeClock) -> Router {
    let layer = RateLimit::builder(MemoryBackend::with_clock(clock.clone()))
        .rule(Rule::new(
            "per-ip",
            Limit::new(Algorithm::Gcra, quota(60, 5)),
        ))
        .rule(
            Rule::new(
                "per-key",
                Limit::new(Algorithm::TokenBucket, quota(100, 10)),
            )
            .matcher(Matcher::any().path_prefix("/v1"))
            .key(Key::header("x-api-key"))
            .cost(Cost::Header(http::HeaderName::from_static("x-cost")))
            .unit("tokens")
            .partition_key(true),
        )
        .rule(
            Rule::new("dark", Limit::new(Algorithm::FixedWindow, quota(1, 1)))
                .key(Key::constant("all"))
                .shadow(),
        )
        .rule(
            Rule::new("upload", Limit::new(Algorithm::SlidingLog, quota(60, 60)))
                .matcher(Matcher::any().path_prefix("/upload"))
                .cost(Cost::ContentLength),
        )
        .legacy_fields(true)
        .build()
        .unwrap();
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/v1/items", get(|| async { "items" }))
        .route("/upload", post(|| async { "stored" }))
        .layer(layer)
}

#[tokio::test]
async fn every_answer_byte_for_byte() {
    let clock = FakeClock::new();
    let app = app(&clock);
    let key = [("x-api-key", "k-1"), ("x-cost", "4")];
    let mut seen = Vec::new();
    // Admitted by all three, the shadow rule not shown.
    seen.push(render(&app, request("GET", "/v1/items", &key)).await);
    // The shadow rule now denies, silently.
    seen.push(render(&app, request("GET", "/v1/items", &key)).await);
    // Refused by the API key's budget: the address's charge is refunded.
    let big = [("x-api-key", "k-1"), ("x-cost", "7")];
    seen.push(render(&app, request("GET", "/v1/items", &big)).await);
    // A cost that can never fit: 413 without Retry-After.
    let huge = [("x-api-key", "k-2"), ("x-cost", "11")];
    seen.push(render(&app, request("GET", "/v1/items", &huge)).await);
    // No key: 400; an unreadable cost: 400; no length: 411.
    seen.push(render(&app, request("GET", "/v1/items", &[("x-cost", "1")])).await);
    let bad = [("x-api-key", "k-1"), ("x-cost", "lots")];
    seen.push(render(&app, request("GET", "/v1/items", &bad)).await);
    seen.push(render(&app, request("POST", "/upload", &[])).await);
    // The address's burst spent: 429 from the first rule.
    for _ in 0..3 {
        render(&app, request("GET", "/", &[])).await;
    }
    seen.push(render(&app, request("GET", "/", &[])).await);
    // A fractional wait later, admitted again.
    clock.advance(Duration::from_millis(1500));
    seen.push(render(&app, request("GET", "/", &[])).await);
    for (i, (seen, expected)) in seen.iter().zip(EXPECTED).enumerate() {
        assert_eq!(seen, expected, "answer {i}");
    }
    assert_eq!(seen.len(), EXPECTED.len());
}

#[tokio::test]
async fn a_store_that_fails_closed_answers_503() {
    use tollgate_redis::harness::{skip_requested, RedisServer};
    let server = match RedisServer::start() {
        Ok(server) => server,
        Err(_) if skip_requested() => return,
        Err(e) => panic!("{e}"),
    };
    let backend = tollgate_redis::RedisBackend::connect(&server.url())
        .await
        .unwrap();
    let layer = RateLimit::builder(backend)
        .rule(Rule::new("closed", Limit::new(Algorithm::Gcra, quota(60, 5))).fail_closed())
        .unavailable_retry_after(Duration::from_millis(1500))
        .build()
        .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    drop(server);
    let seen = render(&app, request("GET", "/", &[])).await;
    assert_eq!(
        seen,
        r#"503
retry-after: 2
content-type: application/problem+json
content-length: 170

{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"rate limit `closed` cannot be checked right now; retry in 2 s","rule":"closed","retry_after":2}"#
    );
}

/// What the requests of [`every_answer_byte_for_byte`] get, in order,
/// as the layer answered before it was tuned for speed.
const EXPECTED: [&str; 9] = [
    // admitted by all three; the shadow rule is not shown
    r#"200
content-type: text/plain; charset=utf-8
ratelimit-policy: "per-ip";q=60;w=60, "per-key";q=100;w=60;qu="tokens";pk=:MHTvRrj6d3U=:
ratelimit: "per-ip";r=4;t=1, "per-key";r=6;t=3;pk=:MHTvRrj6d3U=:
x-ratelimit-limit: 60
x-ratelimit-remaining: 4
x-ratelimit-reset: 1
content-length: 5

items"#,
    // the shadow rule denies, silently
    r#"200
content-type: text/plain; charset=utf-8
ratelimit-policy: "per-ip";q=60;w=60, "per-key";q=100;w=60;qu="tokens";pk=:MHTvRrj6d3U=:
ratelimit: "per-ip";r=3;t=2, "per-key";r=2;t=5;pk=:MHTvRrj6d3U=:
x-ratelimit-limit: 100
x-ratelimit-remaining: 2
x-ratelimit-reset: 5
content-length: 5

items"#,
    // refused by the API key's budget, the address's charge refunded
    r#"429
retry-after: 3
ratelimit-policy: "per-ip";q=60;w=60, "per-key";q=100;w=60;qu="tokens";pk=:MHTvRrj6d3U=:
ratelimit: "per-ip";r=3;t=2, "per-key";r=2;t=3;pk=:MHTvRrj6d3U=:
x-ratelimit-limit: 100
x-ratelimit-remaining: 2
x-ratelimit-reset: 3
content-type: application/problem+json
content-length: 151

{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit `per-key` exceeded; retry in 3 s","rule":"per-key","retry_after":3}"#,
    // a cost that can never fit: 413 without Retry-After
    r#"413
ratelimit-policy: "per-ip";q=60;w=60, "per-key";q=100;w=60;qu="tokens";pk=:awhdK/lXQd0=:
ratelimit: "per-ip";r=3;t=2, "per-key";r=10;t=0;pk=:awhdK/lXQd0=:
x-ratelimit-limit: 60
x-ratelimit-remaining: 3
x-ratelimit-reset: 2
content-type: application/problem+json
content-length: 147

{"type":"about:blank","title":"Payload Too Large","status":413,"detail":"a request costing 11 can never fit rate limit `per-key`","rule":"per-key"}"#,
    // no key: 400
    r#"400
content-type: application/problem+json
content-length: 145

{"type":"about:blank","title":"Bad Request","status":400,"detail":"rate limit `per-key`: the request has no header `x-api-key`","rule":"per-key"}"#,
    // an unreadable cost: 400
    r#"400
content-type: application/problem+json
content-length: 181

{"type":"about:blank","title":"Bad Request","status":400,"detail":"rate limit `per-key`: the `x-cost` header must be a whole number from 0 to 18446744073709551615","rule":"per-key"}"#,
    // no Content-Length: 411
    r#"411
content-type: application/problem+json
content-length: 153

{"type":"about:blank","title":"Length Required","status":411,"detail":"rate limit `upload`: the request must declare its Content-Length","rule":"upload"}"#,
    // the address's burst spent: 429 from the first rule
    r#"429
retry-after: 1
ratelimit-policy: "per-ip";q=60;w=60
ratelimit: "per-ip";r=0;t=1
x-ratelimit-limit: 60
x-ratelimit-remaining: 0
x-ratelimit-reset: 1
content-type: application/problem+json
content-length: 149

{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit `per-ip` exceeded; retry in 1 s","rule":"per-ip","retry_after":1}"#,
    // a fractional wait later, admitted again
    r#"200
content-type: text/plain; charset=utf-8
ratelimit-policy: "per-ip";q=60;w=60
ratelimit: "per-ip";r=0;t=5
x-ratelimit-limit: 60
x-ratelimit-remaining: 0
x-ratelimit-reset: 5
content-length: 2

ok"#,
];

/// A layer of one rule per client address, 60 a minute with a burst of
/// `burst`, answering with `body` when given (else the layer's own).
fn one_rule(
    clock: &FakeClock,
    name: &str,
    burst: u64,
    body: Option<tollgate_http::BodyWriter>,
) -> Router {
    let mut builder = RateLimit::builder(MemoryBackend::with_clock(clock.clone()))
        .rule(Rule::new(
            name,
            Limit::new(Algorithm::Gcra, quota(60, burst)),
        ))
        .legacy_fields(true);
    if let Some(body) = body {
        builder = builder.body(body);
    }
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(builder.build().unwrap())
}

/// A thread keeps its last 429 to answer the next equal refusal: every
/// answer, kept or not, is byte for byte the one a layer that keeps none
/// makes (a body writer of the user's turns the keeping off, and is called
/// for every refusal). Two layers whose rules share a place and a wait take
/// turns on this one thread, each asked twice in a row: the second is
/// answered from the first, and a layer never gets the other's answer.
#[tokio::test]
async fn a_kept_answer_is_the_answer_made_afresh() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let clock = FakeClock::new();
    let written = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&written);
    let counted: tollgate_http::BodyWriter = Arc::new(move |refusal| {
        count.fetch_add(1, Ordering::Relaxed);
        tollgate_http::problem_json(refusal)
    });
    let pairs = [
        (
            one_rule(&clock, "per-ip", 2, None),
            one_rule(&clock, "per-ip", 2, Some(counted)),
        ),
        (
            one_rule(&clock, "per-client", 3, None),
            one_rule(
                &clock,
                "per-client",
                3,
                Some(Arc::new(tollgate_http::problem_json)),
            ),
        ),
    ];
    let mut refused = [0, 0];
    for step in 0..40 {
        for (i, (kept, fresh)) in pairs.iter().enumerate() {
            for _ in 0..2 {
                let seen = render(kept, request("GET", "/", &[])).await;
                assert_eq!(
                    seen,
                    render(fresh, request("GET", "/", &[])).await,
                    "step {step}"
                );
                refused[i] += usize::from(seen.starts_with("429"));
            }
        }
        // Waits of 1 s and 2 s, and an admission now and then.
        clock.advance(Duration::from_millis(if step % 10 == 9 {
            1500
        } else {
            100
        }));
    }
    assert!(refused.iter().all(|&n| n > 40), "{refused:?}");
    assert_eq!(written.load(Ordering::Relaxed), refused[0]);
}
