//! The layer in front of a real axum server on 127.0.0.1, driven by a real
//! HTTP client, with the fields read by an independent parser.

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Query;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use http::StatusCode;
use tollgate::{Algorithm, Backend, BackendExt, FakeClock, Limit, MemoryBackend, Policy, Quota};
use tollgate_http::{
    ClientIp, Cost, ForwardedHeader, HeaderKey, Key, KillSwitch, Matcher, RateLimit, Reconcile,
    ReportedCost, Rule, MAX_KEY_BYTES,
};

use support::{members, serve, Http};

fn limit(algorithm: Algorithm, quota: Quota) -> Limit {
    Limit::new(algorithm, quota)
}

fn per_minute(n: u64, burst: u64) -> Quota {
    Quota::per_minute(n).unwrap().with_burst(burst).unwrap()
}

async fn start<B: Backend + 'static>(limit: RateLimit<B>) -> Http {
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/v1/items", get(|| async { "items" }))
        .layer(limit);
    Http::to(serve(app).await)
}

#[tokio::test]
async fn seed_answer_byte_for_byte() {
    // Token bucket, 100 a minute, burst 20; time stands still, so the 21
    // requests are one quick burst whatever the machine's speed.
    let rule = Rule::new(
        "per-key",
        limit(Algorithm::TokenBucket, per_minute(100, 20)),
    )
    .key(Key::header("x-api-key"));
    let layer = RateLimit::builder(MemoryBackend::with_clock(FakeClock::new()))
        .rule(rule)
        .build()
        .unwrap();
    let http = start(layer).await;
    let key: &[(&str, &[u8])] = &[("x-api-key", b"k-1")];
    for i in 1..=20 {
        let a = http.get("/", key).await;
        assert_eq!(a.status, StatusCode::OK, "request {i}");
        let limit = members(a.header("ratelimit").unwrap());
        assert_eq!(limit[0].param("r"), Some(20 - i));
    }
    let a = http.get("/", key).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(a.header("retry-after"), Some("1"));
    assert_eq!(
        a.header("ratelimit-policy"),
        Some(r#""per-key";q=100;w=60"#)
    );
    assert_eq!(a.header("ratelimit"), Some(r#""per-key";r=0;t=1"#));
    assert_eq!(a.header("content-type"), Some("application/problem+json"));
    assert_eq!(a.json()["status"], 429);
    // The same, read by an independent Structured Fields parser.
    let policy = members(a.header("ratelimit-policy").unwrap());
    assert_eq!(policy.len(), 1);
    assert_eq!(policy[0].name, "per-key");
    assert_eq!(
        (policy[0].param("q"), policy[0].param("w")),
        (Some(100), Some(60))
    );
    let limit = members(a.header("ratelimit").unwrap());
    assert_eq!(
        (limit[0].param("r"), limit[0].param("t")),
        (Some(0), Some(1))
    );
}

/// A per-address rule of `n` a minute behind `client_ip`.
async fn per_ip_server(n: u64, client_ip: ClientIp) -> Http {
    let rule = Rule::new("per-ip", limit(Algorithm::Gcra, per_minute(n, n)));
    let layer = RateLimit::builder(MemoryBackend::with_clock(FakeClock::new()))
        .client_ip(client_ip)
        .rule(rule)
        .build()
        .unwrap();
    start(layer).await
}

#[tokio::test]
async fn spoofed_forwarded_for_without_trusted_proxies() {
    // No trusted proxy: the header is the client's own words and ignored.
    let http = per_ip_server(2, ClientIp::socket()).await;
    for (i, spoof) in ["1.1.1.1", "2.2.2.2", "3.3.3.3"].iter().enumerate() {
        let a = http
            .get("/", &[("x-forwarded-for", spoof.as_bytes())])
            .await;
        let expected = if i < 2 {
            StatusCode::OK
        } else {
            StatusCode::TOO_MANY_REQUESTS
        };
        assert_eq!(a.status, expected, "{spoof}");
    }
}

#[tokio::test]
async fn spoofed_forwarded_for_behind_a_trusted_proxy() {
    // The test client plays the proxy at 127.0.0.1: the client is the first
    // untrusted hop from the right, whatever it put on the left.
    let trusted = ClientIp::behind(
        ["127.0.0.0/8".parse().unwrap()],
        ForwardedHeader::XForwardedFor,
    );
    let http = per_ip_server(2, trusted).await;
    let mut statuses = Vec::new();
    for spoof in ["1.1.1.1", "2.2.2.2", "3.3.3.3"] {
        let xff = format!("{spoof}, 203.0.113.7");
        statuses.push(
            http.get("/", &[("x-forwarded-for", xff.as_bytes())])
                .await
                .status,
        );
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    // Another real client has its own budget.
    let other = http.get("/", &[("x-forwarded-for", b"203.0.113.8")]).await;
    assert_eq!(other.status, StatusCode::OK);
}

#[tokio::test]
async fn ipv6_rotation_inside_a_64_shares_one_budget() {
    let trusted = ClientIp::behind(
        ["127.0.0.1/32".parse().unwrap()],
        ForwardedHeader::Forwarded,
    );
    let http = per_ip_server(3, trusted).await;
    let mut statuses = Vec::new();
    for host in 1..=4 {
        let fwd = format!("for=\"[2001:db8:1:2::{host:x}]:4711\"");
        statuses.push(http.get("/", &[("forwarded", fwd.as_bytes())]).await.status);
    }
    assert_eq!(statuses[..3], [StatusCode::OK; 3]);
    assert_eq!(
        statuses[3],
        StatusCode::TOO_MANY_REQUESTS,
        "a new address in the same /64"
    );
    let elsewhere = http
        .get("/", &[("forwarded", b"for=\"[2001:db8:1:3::1]\"")])
        .await;
    assert_eq!(elsewhere.status, StatusCode::OK, "another /64");
}

#[tokio::test]
async fn layered_rules_are_all_or_nothing() {
    let backend = Arc::new(MemoryBackend::with_clock(FakeClock::new()));
    let ip_policy = Policy::new(limit(Algorithm::Gcra, per_minute(100, 100)));
    let key_policy = Policy::new(limit(Algorithm::TokenBucket, per_minute(2, 2)));
    let layer = RateLimit::builder(Arc::clone(&backend))
        .rule(Rule::new("per-ip", ip_policy.clone()))
        .rule(
            Rule::new("per-key", key_policy.clone())
                .matcher(Matcher::any().path_prefix("/v1"))
                .key(Key::header("x-api-key")),
        )
        .build()
        .unwrap();
    let http = start(layer).await;
    let ip_key = "per-ip|ip=127.0.0.1";
    let ip_policy = backend.prepare(&ip_policy).unwrap();
    let peek_ip = || async {
        backend
            .check(ip_key, &ip_policy, 0)
            .await
            .unwrap()
            .remaining
    };
    let key: &[(&str, &[u8])] = &[("x-api-key", b"k")];
    assert_eq!(http.get("/v1/items", key).await.status, StatusCode::OK);
    assert_eq!(http.get("/v1/items", key).await.status, StatusCode::OK);
    assert_eq!(peek_ip().await, 98);
    let denied = http.get("/v1/items", key).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        peek_ip().await,
        98,
        "the refused request cost the other rule nothing"
    );
    // Both rules are listed, the per-ip one with its numbers after the refund.
    let limits = members(denied.header("ratelimit").unwrap());
    let names: Vec<&str> = limits.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["per-ip", "per-key"]);
    assert_eq!(limits[0].param("r"), Some(98));
    // Outside /v1 only the per-ip rule applies.
    let a = http.get("/", key).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(members(a.header("ratelimit").unwrap()).len(), 1);
}

#[derive(serde::Deserialize)]
struct Used {
    used: u64,
}

#[tokio::test]
async fn reconciled_costs_go_into_debt_and_refund() {
    let clock = FakeClock::new();
    let rule = Rule::new(
        "tokens",
        limit(Algorithm::TokenBucket, per_minute(1000, 1000)),
    )
    .key(Key::constant("tenant"))
    .cost(Cost::Constant(100))
    .reconcile(Reconcile::Extension)
    .unit("tokens");
    let layer = RateLimit::builder(MemoryBackend::with_clock(clock.clone()))
        .rule(rule)
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/chat",
            get(|Query(q): Query<Used>| async move {
                let mut response = "answer".into_response();
                response.extensions_mut().insert(ReportedCost(q.used));
                response
            }),
        )
        .layer(layer);
    let http = Http::to(serve(app).await);
    let remaining = |a: &support::Answer| members(a.header("ratelimit").unwrap())[0].param("r");

    // 900 used against 100 estimated: 800 more forced.
    let a = http.get("/chat?used=900", &[]).await;
    assert_eq!((a.status, remaining(&a)), (StatusCode::OK, Some(100)));
    assert_eq!(
        members(a.header("ratelimit-policy").unwrap())[0].param("q"),
        Some(1000)
    );
    assert!(a
        .header("ratelimit-policy")
        .unwrap()
        .contains(r#"qu="tokens""#));
    // Admitted on the last 100, then 500 more: 500 in debt.
    let a = http.get("/chat?used=600", &[]).await;
    assert_eq!((a.status, remaining(&a)), (StatusCode::OK, Some(0)));
    // Denied until the debt and the next estimate are repaid: 600 tokens
    // at 1000 a minute is 36 s.
    let a = http.get("/chat?used=1", &[]).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(a.header("retry-after"), Some("36"));
    clock.advance(Duration::from_secs(35));
    assert_eq!(
        http.get("/chat?used=1", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    clock.advance(Duration::from_secs(1));
    // Used only 10 of the 100 charged: 90 come back.
    let a = http.get("/chat?used=10", &[]).await;
    assert_eq!((a.status, remaining(&a)), (StatusCode::OK, Some(90)));
}

#[tokio::test]
async fn shadow_rules_and_the_kill_switch() {
    let switch = KillSwitch::new();
    let layer = RateLimit::builder(MemoryBackend::with_clock(FakeClock::new()))
        .kill_switch(switch.clone())
        .rule(
            Rule::new("dark", limit(Algorithm::FixedWindow, per_minute(1, 1)))
                .key(Key::constant("x"))
                .shadow(),
        )
        .rule(
            Rule::new("live", limit(Algorithm::FixedWindow, per_minute(2, 2)))
                .key(Key::constant("y")),
        )
        .build()
        .unwrap();
    assert!(!layer.kill_switch().is_shadow_all());
    let http = start(layer).await;
    let a = http.get("/", &[]).await;
    assert_eq!(a.status, StatusCode::OK);
    // A shadow rule never shows.
    assert_eq!(
        members(a.header("ratelimit").unwrap())
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>(),
        ["live"]
    );
    // The shadow rule's budget is spent, yet it denies nothing.
    assert_eq!(http.get("/", &[]).await.status, StatusCode::OK);
    assert_eq!(
        http.get("/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    switch.shadow_all(true);
    let a = http.get("/", &[]).await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.header("ratelimit").is_none(), "every rule is shadow now");
    switch.shadow_all(false);
    assert_eq!(
        http.get("/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn a_cost_that_can_never_fit_is_413_without_retry_after() {
    let rule = Rule::new(
        "bytes",
        limit(Algorithm::TokenBucket, per_minute(1000, 100)),
    )
    .key(Key::constant("all"))
    .cost(Cost::Header(http::HeaderName::from_static("x-cost")));
    let layer = RateLimit::builder(MemoryBackend::new())
        .rule(rule)
        .legacy_fields(true)
        .build()
        .unwrap();
    let http = start(layer).await;
    let a = http.get("/", &[("x-cost", b"101")]).await;
    assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(a.header("retry-after"), None);
    assert_eq!(a.json()["status"], 413);
    assert_eq!(a.header("x-ratelimit-limit"), Some("1000"));
    let a = http.get("/", &[("x-cost", b"100")]).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.header("x-ratelimit-remaining"), Some("0"));
    let a = http.get("/", &[("x-cost", b"ten")]).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.json()["detail"].as_str().unwrap().contains("x-cost"));
}

#[tokio::test]
async fn oversize_and_binary_keys_are_400() {
    let raw = Key::Header(HeaderKey {
        name: http::HeaderName::from_static("x-tenant"),
        hashed: false,
    });
    let layer = RateLimit::builder(MemoryBackend::new())
        .rule(Rule::new("tenant", limit(Algorithm::Gcra, per_minute(10, 10))).key(raw))
        .rule(
            Rule::new("api-key", limit(Algorithm::Gcra, per_minute(10, 10)))
                .matcher(Matcher::any().path_prefix("/v1"))
                .key(Key::header("x-api-key")),
        )
        .build()
        .unwrap();
    let http = start(layer).await;
    let long = "t".repeat(MAX_KEY_BYTES + 1);
    let a = http.get("/", &[("x-tenant", long.as_bytes())]).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let detail = a.json()["detail"].as_str().unwrap().to_string();
    assert!(
        detail.contains("x-tenant") && !detail.contains(&long),
        "{detail}"
    );
    let a = http.get("/", &[("x-tenant", b"caf\xe9\x80")]).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let a = http.get("/", &[]).await;
    assert_eq!(
        a.status,
        StatusCode::BAD_REQUEST,
        "a missing key is refused by default"
    );
    // A hashed key takes any bytes and never shows them.
    let a = http
        .get(
            "/v1/items",
            &[("x-tenant", b"t1"), ("x-api-key", b"\xff\xfe secret")],
        )
        .await;
    assert_eq!(a.status, StatusCode::OK);
}

#[tokio::test]
async fn fail_closed_is_503_and_fail_open_passes_when_redis_stops() {
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
        .rule(
            Rule::new("closed", limit(Algorithm::Gcra, per_minute(100, 100)))
                .matcher(Matcher::any().path_prefix("/v1"))
                .fail_closed(),
        )
        .rule(
            Rule::new("open", limit(Algorithm::Gcra, per_minute(100, 100)))
                .matcher(Matcher::any().route("/")),
        )
        .unavailable_retry_after(Duration::from_millis(1500))
        .build()
        .unwrap();
    let http = start(layer).await;
    assert_eq!(http.get("/v1/items", &[]).await.status, StatusCode::OK);
    assert_eq!(http.get("/", &[]).await.status, StatusCode::OK);
    drop(server);
    let a = http.get("/v1/items", &[]).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(a.header("retry-after"), Some("2"));
    assert_eq!(a.json()["rule"], "closed");
    let a = http.get("/", &[]).await;
    assert_eq!(a.status, StatusCode::OK, "fail open");
    assert!(
        a.header("ratelimit").is_none(),
        "no numbers without a store"
    );
}

#[tokio::test]
async fn keys_on_the_matched_route_and_a_replaced_body() {
    let rule =
        Rule::new("per-route", limit(Algorithm::FixedWindow, per_minute(1, 1))).key(Key::Route);
    let body: tollgate_http::BodyWriter = Arc::new(|refusal: &tollgate_http::Refusal| {
        (
            http::HeaderValue::from_static("text/plain"),
            format!("slow down ({})", refusal.rule).into(),
        )
    });
    let layer = RateLimit::builder(MemoryBackend::with_clock(FakeClock::new()))
        .rule(rule)
        .body(body)
        .build()
        .unwrap();
    let app = Router::new()
        .route("/users/{id}", get(|| async { "user" }))
        .layer(layer);
    let http = Http::to(serve(app).await);
    assert_eq!(http.get("/users/1", &[]).await.status, StatusCode::OK);
    // Another user, the same route template: the same budget.
    let a = http.get("/users/2", &[]).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(a.header("content-type"), Some("text/plain"));
    assert_eq!(&a.body[..], b"slow down (per-route)");
    assert!(a.header("retry-after").is_some());
}

#[tokio::test]
async fn a_plain_hyper_service() {
    use hyper_util::rt::TokioIo;
    use hyper_util::service::TowerToHyperService;
    use tower::service_fn;

    let layer = RateLimit::builder(MemoryBackend::with_clock(FakeClock::new()))
        .rule(Rule::new(
            "per-ip",
            limit(Algorithm::Gcra, per_minute(1, 1)),
        ))
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let svc = tower::ServiceBuilder::new()
                // What axum's connect info does: the peer, for the layer.
                .map_request(move |mut req: http::Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(tollgate_http::PeerAddr(peer));
                    req
                })
                .layer(layer.clone())
                .service(service_fn(|_req| async {
                    let body = http_body_util::Full::new(bytes::Bytes::from("hi"));
                    Ok::<_, std::convert::Infallible>(http::Response::new(body))
                }));
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc)),
            );
        }
    });
    let http = Http::to(addr);
    let a = http.get("/", &[]).await;
    assert_eq!((a.status, &a.body[..]), (StatusCode::OK, &b"hi"[..]));
    assert_eq!(
        http.get("/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// `Retry-After` is never early, for every algorithm: a wait of 1.5 s is
/// answered 2 (and so is the refusal's `t`), never 1, and a retry exactly
/// that long after is admitted. (The sliding counter still weighs the whole
/// previous window at 3 s: its wait is 4.5 s, answered 5.)
#[tokio::test]
async fn fractional_waits_are_rounded_up_for_every_algorithm() {
    for algorithm in Algorithm::ALL {
        let clock = FakeClock::new();
        // One request every 3 s, no burst: refused at 1.5 s, 1.5 s early.
        let quota = Quota::with_parts(1, 3_000_000_000, 1).unwrap();
        let rule = Rule::new("slow", limit(algorithm, quota)).key(Key::constant("k"));
        let layer = RateLimit::builder(MemoryBackend::with_clock(clock.clone()))
            .rule(rule)
            .build()
            .unwrap();
        let addr = serve(
            Router::new()
                .route("/", get(|| async { "ok" }))
                .layer(layer),
        )
        .await;
        let http = Http::to(addr);
        assert_eq!(
            http.get("/", &[]).await.status,
            StatusCode::OK,
            "{algorithm:?}"
        );
        clock.advance(Duration::from_millis(1500));
        // The leaky queue queues the request due in 1.5 s instead of
        // refusing it: the one after it is refused.
        let queued = (algorithm == Algorithm::LeakyQueue).then(|| {
            let http = Http::to(addr);
            tokio::spawn(async move { http.get("/", &[]).await.status })
        });
        if queued.is_some() {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let refused = http.get("/", &[]).await;
        assert_eq!(
            refused.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{algorithm:?}"
        );
        let told = match algorithm {
            Algorithm::SlidingCounter => 5u64,
            _ => 2,
        };
        let expected = told.to_string();
        assert_eq!(
            refused.header("retry-after"),
            Some(expected.as_str()),
            "{algorithm:?}"
        );
        let reset = members(refused.header("ratelimit").unwrap())[0].param("t");
        assert_eq!(reset.map(|t| t as u64), Some(told), "{algorithm:?}");
        clock.advance(Duration::from_secs(told));
        let retried = http.get("/", &[]).await;
        assert_eq!(
            retried.status,
            StatusCode::OK,
            "{algorithm:?}: early by Retry-After"
        );
        if let Some(queued) = queued {
            assert_eq!(queued.await.unwrap(), StatusCode::OK);
        }
    }
}
