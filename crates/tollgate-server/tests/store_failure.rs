//! The store failing under a running server, on a real Redis that the test
//! pauses (`SIGSTOP`): the circuit breaker, each `on_store_error` mode, a
//! reload changing one, and calls past their deadline charging nothing.
//! Needs `redis-server` (TOLLGATE_SKIP_REDIS=1 skips, saying so).

mod support;

use std::time::{Duration, Instant};

use tollgate::BreakerState;
use tollgate_redis::harness::{skip_requested, RedisServer};

const DEADLINE: Duration = Duration::from_millis(300);

/// Three descriptors, one per failure mode, and a breaker that opens after
/// three failures and stays open long enough for the test.
fn config(mode_of_b: &str) -> String {
    format!(
        "
domain: f
descriptors:
  - key: a
    on_store_error: closed
    rate_limit: {{ unit: minute, requests_per_unit: 100 }}
  - key: b
    on_store_error: {mode_of_b}
    rate_limit: {{ unit: minute, requests_per_unit: 100 }}
  - key: open
    rate_limit: {{ unit: minute, requests_per_unit: 100 }}
  - key: share
    on_store_error: fallback
    rate_limit: {{ unit: minute, requests_per_unit: 10 }}
store:
  instances: 2
  breaker: {{ consecutive_failures: 3, open_for: 60s }}
"
    )
}

/// Status of one `/v1/check` of `key` (value `x`), and how long it took.
async fn check(server: &support::TestServer, key: &str) -> (u16, Duration) {
    check_value(server, key, "x").await
}

async fn check_value(server: &support::TestServer, key: &str, value: &str) -> (u16, Duration) {
    let body = format!(
        r#"{{"domain":"f","descriptors":[{{"entries":[{{"key":"{key}","value":"{value}"}}]}}]}}"#
    );
    let started = Instant::now();
    let (status, _, _) = support::send("POST", &server.http_url("/v1/check"), &body).await;
    (status, started.elapsed())
}

fn redis() -> Option<RedisServer> {
    if skip_requested() {
        eprintln!("TOLLGATE_SKIP_REDIS=1: the store failure tests are skipped");
        return None;
    }
    Some(RedisServer::start().unwrap_or_else(|e| panic!("{e}")))
}

#[tokio::test]
async fn an_open_breaker_answers_each_mode_at_once_without_reaching_redis() {
    let Some(redis) = redis() else { return };
    let server = support::start_with(&config("closed"), |o| {
        o.store = redis.url();
        o.store_timeout = DEADLINE;
        o.grpc = None;
    })
    .await;
    assert_eq!(check(&server, "a").await.0, 200);
    let before = redis.script_calls().unwrap();

    redis.pause().unwrap();
    for _ in 0..3 {
        let (status, took) = check(&server, "a").await;
        assert_eq!(status, 503, "closed: refused while the store is paused");
        assert!(
            took >= DEADLINE,
            "the first failures wait for the deadline: {took:?}"
        );
    }
    let store = server.running.engine.backend();
    assert_eq!(store.breaker_state(), BreakerState::Open);
    let mut answers = Vec::new();
    for key in [
        "a", "b", "open", "share", "share", "share", "share", "share", "share",
    ] {
        let (status, took) = check(&server, key).await;
        assert!(
            took < DEADLINE / 3,
            "{key}: the open breaker answers at once, took {took:?}"
        );
        answers.push(status);
    }
    // Closed refuses; open admits; the fallback admits this instance's share
    // (10 / 2 instances = 5) and refuses the rest.
    assert_eq!(answers, [503, 503, 200, 200, 200, 200, 200, 200, 429]);
    // `/v1/top` (and so the live page) says so.
    let (_, text) = support::get(&server.http_url("/v1/top")).await;
    let top: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(top["store"]["state"], "breaker open", "{text}");
    assert_eq!(top["store"]["breaker"], "open", "{text}");
    assert_eq!(top["store"]["fallback_in_use"], true, "{text}");
    assert_eq!(top["store"]["url"], tollgate_redis::redact(&redis.url()));

    // A reload changes `b`'s mode while the store is still down.
    std::fs::write(server.config_path(), config("fallback")).unwrap();
    tollgate_server::reload::reload(&server.running.engine, &server.config_path()).unwrap();
    assert_eq!(check(&server, "b").await.0, 200, "b now falls back");

    redis.resume().unwrap();
    // Only the three calls made before the breaker opened ever reach Redis.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(redis.script_calls().unwrap() - before, 3);

    let (_, metrics) = support::get_metrics_text();
    assert!(
        metrics.contains(r#"tollgate_breaker_transitions_total{store="redis",to="open"}"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"tollgate_breaker_state{store="redis"}"#),
        "{metrics}"
    );
    server.running.shutdown().await;
}

#[tokio::test]
async fn calls_refused_past_their_deadline_are_never_charged_later() {
    let Some(redis) = redis() else { return };
    let yaml = "
domain: f
descriptors:
  - key: a
    on_store_error: closed
    rate_limit: { unit: hour, requests_per_unit: 3 }
";
    let server = support::start_with(yaml, |o| {
        o.store = redis.url();
        o.store_timeout = DEADLINE;
        o.grpc = None;
    })
    .await;
    // Another key: loads the script, leaves `x`'s limit whole.
    assert_eq!(check_value(&server, "a", "warm-up").await.0, 200);
    redis.pause().unwrap();
    // Fewer than the breaker's five failures: each call reaches Redis's
    // socket, waits there, and is answered 503 at the deadline.
    for _ in 0..3 {
        assert_eq!(check(&server, "a").await.0, 503);
    }
    redis.resume().unwrap();
    // Redis now runs the three calls it held: each is past its deadline.
    let answers = [
        check(&server, "a").await.0,
        check(&server, "a").await.0,
        check(&server, "a").await.0,
        check(&server, "a").await.0,
    ];
    assert_eq!(
        answers,
        [200, 200, 200, 429],
        "the whole limit is still there"
    );
    server.running.shutdown().await;
}

#[tokio::test]
async fn an_http_rule_falls_back_to_this_instances_share() {
    let Some(redis) = redis() else { return };
    let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let yaml = "
http:
  rules:
    - name: per-ip
      on_store_error: fallback
      limit: { unit: hour, requests_per_unit: 4 }
store:
  instances: 2
  breaker: { consecutive_failures: 1, open_for: 60s }
";
    let server = support::start_with(yaml, |o| {
        o.store = redis.url();
        o.store_timeout = DEADLINE;
        o.grpc = None;
        o.proxy = Some(tollgate_server::server::ProxyOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            upstream,
            timeout: Duration::from_secs(30),
        });
    })
    .await;
    let url = format!("http://{}/", server.running.proxy.unwrap());
    assert_eq!(support::get(&url).await.0, 200);
    redis.pause().unwrap();
    // The first call waits out the deadline and opens the breaker; then
    // this instance's share, 4 / 2 = 2, is admitted in process.
    let answers = [
        support::get(&url).await.0,
        support::get(&url).await.0,
        support::get(&url).await.0,
    ];
    redis.resume().unwrap();
    assert_eq!(answers, [200, 200, 429]);
    server.running.shutdown().await;
}
