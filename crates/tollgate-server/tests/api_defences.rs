//! What the HTTP API (and, where it shares the decision, gRPC) defends
//! against, through a real server: slow bodies holding connections, key
//! floods, costs that never fit, per-value metric floods, and anyone
//! reaching `/v1/check` and `/metrics`.

mod support;

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use support::{send, send_with};
use tokio::io::AsyncWriteExt;
use tollgate_server::api::ApiToken;
use tollgate_server::listener::Pace;

const CONFIG: &str = "
domain: web
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: visitor
    rate_limit: { unit: second, requests_per_unit: 1000 }
  - key: member
    rate_limit: { algorithm: fixed_window, unit: minute, requests_per_unit: 2 }
  - key: tenant
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 100 }
";

fn check(key: &str, value: &str, hits: u64) -> String {
    serde_json::json!({
        "domain": "web",
        "descriptors": [{"entries": [{"key": key, "value": value}]}],
        "hits": hits,
    })
    .to_string()
}

fn refused(reason: &str) -> u64 {
    let text = support::get_metrics_text().1;
    let needle = format!("tollgate_server_refused_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&needle))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test]
async fn slow_bodies_cannot_hold_the_connections() {
    const BOUND: usize = 5;
    let server = support::start_with(CONFIG, |o| {
        o.limits.max_connections = BOUND;
        o.limits.body_pace = Pace {
            timeout: Duration::from_secs(1),
            min_rate: 100,
        };
    })
    .await;
    let addr = server.running.http.unwrap();
    let before = refused("body_timeout");
    // Every connection the listener allows, each sending a body a byte
    // every 200 ms (the issue's attack, faster).
    let mut slow = Vec::new();
    for _ in 0..BOUND {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"POST /v1/check HTTP/1.1\r\nhost: t\r\ncontent-length: 1000\r\n\r\n")
            .await
            .unwrap();
        slow.push(tokio::spawn(support::trickle(
            stream,
            Duration::from_millis(200),
        )));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        support::get(&server.http_url("/healthz")).await.0,
        503,
        "the slow bodies hold every connection"
    );
    for task in slow {
        let answer = task.await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    }
    assert_eq!(support::get(&server.http_url("/healthz")).await.0, 200);
    assert!(refused("body_timeout") >= before + BOUND as u64);
    server.running.shutdown().await;
}

#[tokio::test]
async fn a_cost_that_never_fits_is_413_without_retry_after() {
    let server = support::start(CONFIG).await;
    let url = server.http_url("/v1/check");
    // envoyproxy/ratelimit's counting (a limit in its form) and tollgate's.
    for key in ["user", "member"] {
        let (status, text, headers) = send("POST", &url, &check(key, "ada", 3)).await;
        assert_eq!(status, 413, "{key}: {text}");
        assert!(!headers.contains_key("retry-after"), "{headers:?}");
    }
    // With tollgate's counting the refusal cost nothing.
    let (status, _, headers) = send("POST", &url, &check("member", "ada", 2)).await;
    assert_eq!(status, 200);
    let (status, _, headers_429) = send("POST", &url, &check("member", "ada", 1)).await;
    assert_eq!(status, 429);
    assert!(headers_429.contains_key("retry-after") && !headers.contains_key("retry-after"));
    server.running.shutdown().await;
}

#[test]
fn burst_zero_is_refused_at_load() {
    let e = tollgate_server::config::Config::parse(
        "f.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { algorithm: token_bucket, unit: second, requests_per_unit: 5, burst: 0 }\n",
    )
    .unwrap_err();
    assert_eq!(
        (e.line, e.message.as_str()),
        (4, "`burst` must be at least 1")
    );
}

#[tokio::test]
async fn long_descriptor_values_are_refused_on_both_apis() {
    let server = support::start(CONFIG).await;
    let long = "x".repeat(257);
    let (status, text, _) = send(
        "POST",
        &server.http_url("/v1/check"),
        &check("user", &long, 1),
    )
    .await;
    assert_eq!(status, 400, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["field"], "descriptors[0].entries[0].value");
    assert!(v["error"].as_str().unwrap().contains("257 bytes"), "{v}");
    let at_bound = "x".repeat(256);
    let (status, text, _) = send(
        "POST",
        &server.http_url("/v1/check"),
        &check("user", &at_bound, 1),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let mut grpc = RateLimitServiceClient::connect(server.grpc_url())
        .await
        .unwrap();
    let status = grpc
        .should_rate_limit(RateLimitRequest {
            domain: "web".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "user".into(),
                    value: long,
                }],
                ..RateLimitDescriptor::default()
            }],
            hits_addend: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    server.running.shutdown().await;
}

#[tokio::test]
async fn the_memory_store_holds_a_bounded_number_of_keys_and_forgets_idle_ones() {
    // The bound from the file, the sweep from the flag.
    let config = format!("{CONFIG}memory: {{ max_keys: 10, sweep_every: 1h }}\n");
    let server = support::start_with(&config, |o| {
        o.memory.sweep_every = Some(Duration::from_millis(200));
    })
    .await;
    let url = server.http_url("/v1/check");
    for i in 0..50 {
        let (status, text, _) = send("POST", &url, &check("visitor", &format!("v{i}"), 1)).await;
        assert!(status == 200 || status == 429, "{status} {text}");
    }
    let Some(memory) = server.running.engine.backend().memory() else {
        unreachable!("the test server's store is memory")
    };
    assert!(memory.len() <= 10, "{} keys held", memory.len());
    // A second's window, the limiter's idle grace (10 s), a sweep every 200 ms.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !memory.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} keys never swept",
            memory.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.running.shutdown().await;
}

#[tokio::test]
async fn per_value_metric_series_are_bounded() {
    tollgate_server::metrics::bound_detailed_series(3);
    let server = support::start(CONFIG).await;
    let url = server.http_url("/v1/check");
    // 20 one-off values first, then four busy ones: the series go to the
    // busy values (from their second hit), three of them, not to the
    // values that came first.
    let mut values: Vec<String> = (0..20).map(|i| format!("t{i}")).collect();
    for _ in 0..3 {
        values.extend(["b0", "b1", "b2", "b3"].map(String::from));
    }
    for value in &values {
        assert_eq!(send("POST", &url, &check("tenant", value, 1)).await.0, 200);
    }
    let text = support::get_metrics_text().1;
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tollgate_server_hits_total{rule=\"web.tenant"))
        .collect();
    assert_eq!(series.len(), 4, "{series:#?}");
    for busy in ["b0", "b1", "b2"] {
        let own = format!("tollgate_server_hits_total{{rule=\"web.tenant_{busy}\"}} 2");
        assert!(series.contains(&own.as_str()), "{series:#?}");
    }
    // The one-offs, each busy value's first hit, and `b3`'s three.
    assert!(
        series.contains(&"tollgate_server_hits_total{rule=\"web.tenant:other\"} 26"),
        "{series:#?}"
    );
    server.running.shutdown().await;
}

#[tokio::test]
async fn a_token_guards_the_api_and_metrics_but_not_health_or_grpc() {
    let server = support::start_with(CONFIG, |o| {
        o.http_token = ApiToken::new("s3cret");
    })
    .await;
    let before = refused("unauthorized");
    let body = check("user", "ada", 1);
    let json = r#"{"domain":"web","descriptors":[{"entries":[{"key":"user","value":"eve"}]}]}"#;
    for (method, path, body) in [
        ("POST", "/v1/check", body.as_str()),
        ("POST", "/json", json),
        ("GET", "/metrics", ""),
    ] {
        let url = server.http_url(path);
        let (status, text, headers) = send(method, &url, body).await;
        assert_eq!(status, 401, "{path}: {text}");
        assert_eq!(headers["www-authenticate"], "Bearer realm=\"tollgate\"");
        assert!(!text.contains("s3cret"));
        let wrong = [("authorization", "Bearer s3cre")];
        assert_eq!(send_with(method, &url, body, &wrong).await.0, 401, "{path}");
        let right = [("authorization", "Bearer s3cret")];
        assert_eq!(send_with(method, &url, body, &right).await.0, 200, "{path}");
    }
    assert!(refused("unauthorized") >= before + 6);
    for open in ["/healthz", "/readyz", "/healthcheck"] {
        assert_eq!(support::get(&server.http_url(open)).await.0, 200, "{open}");
    }
    // Envoy's filter sends no credentials: gRPC answers as before.
    let mut grpc = RateLimitServiceClient::connect(server.grpc_url())
        .await
        .unwrap();
    let answer = grpc
        .should_rate_limit(RateLimitRequest {
            domain: "web".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "user".into(),
                    value: "bob".into(),
                }],
                ..RateLimitDescriptor::default()
            }],
            hits_addend: 1,
        })
        .await;
    assert!(answer.is_ok(), "{answer:?}");
    server.running.shutdown().await;
}

#[test]
fn the_memory_section_is_validated() {
    let parse = |yaml: &str| tollgate_server::config::Config::parse("f.yaml", yaml);
    let e = parse("memory:\n  max_keys: 0\n").unwrap_err();
    assert_eq!(
        (e.line, e.message.as_str()),
        (2, "`max_keys` must be at least 1")
    );
    let e = parse("memory:\n  sweep_every: soon\n").unwrap_err();
    assert!(e.message.starts_with("invalid period `soon`"), "{e}");
    let limits = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n";
    let config = parse(&format!(
        "{limits}memory:\n  max_keys: 5\n  sweep_every: 1m\n"
    ))
    .unwrap();
    assert_eq!(config.memory().max_keys, Some(5));
    assert_eq!(config.memory().sweep_every, Some(Duration::from_secs(60)));
}
