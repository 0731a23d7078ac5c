//! The HTTP JSON API, health, and a `/metrics` scrape read by a
//! Prometheus text parser.

mod support;

use support::send;

const CONFIG: &str = "
domain: web
descriptors:
  - key: user
    rate_limit: { algorithm: gcra, unit: minute, requests_per_unit: 2 }
";

fn body(value: &str) -> String {
    format!(
        r#"{{"domain":"web","descriptors":[{{"entries":[{{"key":"user","value":"{value}"}}]}}]}}"#
    )
}

#[tokio::test]
async fn check_answers_200_then_429_with_numbers() {
    let server = support::start(CONFIG).await;
    let url = server.http_url("/v1/check");
    let (status, text, _) = send("POST", &url, &body("ada")).await;
    assert_eq!(status, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["overall_code"], "OK");
    let s = &v["statuses"][0];
    assert_eq!(s["limit_remaining"], 1);
    assert_eq!(s["current_limit"]["algorithm"], "gcra");
    assert_eq!(s["current_limit"]["requests_per_unit"], 2);
    assert_eq!(s["current_limit"]["period_ns"], 60_000_000_000u64);
    send("POST", &url, &body("ada")).await;
    let (status, text, headers) = send("POST", &url, &body("ada")).await;
    assert_eq!(status, 429, "{text}");
    assert!(headers.contains_key("retry-after"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["statuses"][0]["code"], "OVER_LIMIT");
    assert!(v["statuses"][0]["retry_after_ns"].as_u64().unwrap() > 0);
    server.running.shutdown().await;
}

#[tokio::test]
async fn bad_requests_get_400_naming_the_field() {
    let server = support::start(CONFIG).await;
    let url = server.http_url("/v1/check");
    for (input, field) in [
        (
            r#"{"domain":"web","descriptors":[{"entries":[{"key":"user"}]}]}"#,
            "descriptors[0].entries[0]",
        ),
        (
            r#"{"domain":"web","descriptors":[{"entries":[{"key":"user","value":"a"}],"hits":-1}]}"#,
            "descriptors[0].hits",
        ),
        (r#"{"domain":"web","descriptors":[],"extra":1}"#, "extra"),
        (
            r#"{"domain":"","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#,
            "domain",
        ),
        (r#"{"domain":"web","descriptors":[]}"#, "descriptors"),
        (
            r#"{"domain":"web","descriptors":[{"entries":[]}]}"#,
            "descriptors[0].entries",
        ),
    ] {
        let (status, text, _) = send("POST", &url, input).await;
        assert_eq!(status, 400, "{input}: {text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["field"], field, "{input}: {text}");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{text}");
    }
    let (status, text, _) = send("POST", &url, "not json").await;
    assert_eq!(status, 400, "{text}");
    let huge = "x".repeat(70_000);
    let (status, _, _) = send("POST", &url, &huge).await;
    assert_eq!(status, 413);
    server.running.shutdown().await;
}

#[tokio::test]
async fn health_and_readiness() {
    let server = support::start(CONFIG).await;
    assert_eq!(support::get(&server.http_url("/healthz")).await.0, 200);
    let (status, text) = support::get(&server.http_url("/readyz")).await;
    assert_eq!(status, 200, "{text}");
    server.running.shutdown().await;
}

#[tokio::test]
async fn metrics_scrape_parses_as_prometheus_text() {
    let server = support::start(
        "
domain: scrape
descriptors:
  - key: k
    rate_limit: { unit: minute, requests_per_unit: 5 }
",
    )
    .await;
    let url = server.http_url("/v1/check");
    let one = r#"{"domain":"scrape","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#;
    for _ in 0..7 {
        send("POST", &url, one).await;
    }
    let (status, text) = support::get(&server.http_url("/metrics")).await;
    assert_eq!(status, 200);
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let value = |name: &str| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name && s.labels.get("rule") == Some("scrape.k"))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
                ref other => panic!("{name} is not a counter: {other:?}"),
            })
    };
    assert_eq!(value("tollgate_server_hits_total"), Some(7.0));
    assert_eq!(value("tollgate_server_over_limit_total"), Some(2.0));
    // Only the 5th of 5 leaves under 20 % (envoyproxy/ratelimit's mark).
    assert_eq!(value("tollgate_server_near_limit_total"), Some(1.0));
    let histogram = scrape.samples.iter().find(|s| {
        s.metric == "tollgate_server_decision_seconds" && s.labels.get("api") == Some("http")
    });
    assert!(
        matches!(
            histogram.map(|s| &s.value),
            Some(prometheus_parse::Value::Histogram(_))
        ),
        "{text}"
    );
    assert!(scrape
        .samples
        .iter()
        .any(|s| s.metric == "tollgate_server_config_loads_total"));
    server.running.shutdown().await;
}
