//! `GET /v1/top` through a running server: 100,000 distinct keys and a few
//! heavy hitters, named with counts within the stated error bound, a shadow
//! limit's would-be refusals counted apart, behind the API token.

mod support;

use serde_json::Value;
use support::send_with;
use tollgate::top::TopConfig;
use tollgate_server::api::ApiToken;

const CONFIG: &str = "
domain: api
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 1000 }
  - key: tenant
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 100 }
";

const AUTH: [(&str, &str); 1] = [("authorization", "Bearer s3cret")];

fn descriptor(key: &str, value: &str, hits: u64) -> String {
    format!(r#"{{"entries":[{{"key":"{key}","value":"{value}"}}],"hits":{hits}}}"#)
}

fn rule<'a>(top: &'a Value, path: &str) -> &'a Value {
    let rules = top["rules"].as_array().unwrap();
    rules
        .iter()
        .find(|r| r["rule"] == path)
        .unwrap_or_else(|| panic!("no rule {path} in {top}"))
}

fn key<'a>(window: &'a Value, name: &str) -> &'a Value {
    let keys = window["keys"].as_array().unwrap();
    keys.iter()
        .find(|k| k["key"] == name)
        .unwrap_or_else(|| panic!("{name} not among the top keys: {window}"))
}

#[tokio::test]
async fn names_the_heavy_hitters_among_100_000_keys() {
    let server = support::start_with(CONFIG, |o| {
        o.http_token = ApiToken::new("s3cret");
    })
    .await;
    let check = server.http_url("/v1/check");
    // 250 requests of 400 light users each, plus `heavy-a` (10 hits),
    // `heavy-b` twice (10 hits each) and tenant `acme` (1 hit).
    const REQUESTS: u64 = 250;
    const LIGHT: u64 = 400;
    for r in 0..REQUESTS {
        let mut descriptors: Vec<String> = (0..LIGHT)
            .map(|i| descriptor("user", &format!("u{}", r * LIGHT + i), 1))
            .collect();
        descriptors.push(descriptor("user", "heavy-a", 10));
        descriptors.push(descriptor("user", "heavy-b", 10));
        descriptors.push(descriptor("user", "heavy-b", 10));
        descriptors.push(descriptor("tenant", "acme", 1));
        let body = format!(
            r#"{{"domain":"api","descriptors":[{}]}}"#,
            descriptors.join(",")
        );
        let (status, text, _) = send_with("POST", &check, &body, &AUTH).await;
        assert!(status == 200 || status == 429, "{status}: {text}");
    }

    let url = server.http_url("/v1/top?n=5");
    assert_eq!(send_with("GET", &url, "", &[]).await.0, 401);
    let (status, text, headers) = send_with("GET", &url, "", &AUTH).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["content-type"], "application/json");
    let top: Value = serde_json::from_str(&text).unwrap();

    let user = rule(&top, "api.user");
    assert_eq!(user["limit"]["requests"], 1000);
    let minute = &user["windows"][0];
    let light = REQUESTS * LIGHT;
    let (a_hits, b_hits) = (REQUESTS * 10, REQUESTS * 20);
    let total = light + a_hits + b_hits;
    assert_eq!(minute["totals"]["hits"], total);
    // Each heavy user gets 1,000 a minute, the rest is refused; the
    // traffic may straddle a minute (windows align on the Unix epoch),
    // giving each a second 1,000.
    let admitted = minute["totals"]["admitted"].as_u64().unwrap();
    assert!(
        (light + 2_000..=light + 4_000).contains(&admitted),
        "{admitted}"
    );
    assert_eq!(minute["totals"]["refused"], total - admitted);
    let bound = minute["error_bound"].as_u64().unwrap();
    let k = TopConfig::default().capacity() as u64;
    assert!(bound <= total / k, "bound {bound} over N/k");
    assert!(
        a_hits > bound && b_hits > bound,
        "the heavy hitters must be above {bound}"
    );
    for (name, true_hits) in [("api/user=heavy-b", b_hits), ("api/user=heavy-a", a_hits)] {
        let k = key(minute, name);
        let (hits, error) = (k["hits"].as_u64().unwrap(), k["error"].as_u64().unwrap());
        assert!(hits >= true_hits && hits - error <= true_hits, "{k}");
        assert!(error <= bound, "{k}");
        let refused = k["refused"].as_u64().unwrap();
        // All but 1,000 (2,000 across a minute's end) are refused.
        assert!(refused <= true_hits - 1_000, "{k}");
        assert!(refused + error >= true_hits - 2_000, "{k}");
        assert!(k["refusal_ratio"].as_f64().unwrap() > 0.0);
        // Thousands of hits in seconds against 1,000 a minute.
        assert!(k["limit_ratio"].as_f64().unwrap() > 1.0, "{k}");
    }
    assert_eq!(minute["keys"][0]["key"], "api/user=heavy-b");
    assert_eq!(minute["keys"].as_array().unwrap().len(), 5);

    // The shadow limit refuses nothing and counts what it would have.
    let tenant = &rule(&top, "api.tenant")["windows"][0];
    let acme = key(tenant, "api/tenant=acme");
    assert_eq!(acme["hits"], REQUESTS);
    let admitted = acme["admitted"].as_u64().unwrap();
    assert!((100..=200).contains(&admitted), "{acme}");
    assert_eq!(acme["shadow_refused"], REQUESTS - admitted);
    assert_eq!(acme["refused"], 0);

    let (status, text, _) = send_with("GET", &server.http_url("/v1/top?n=x"), "", &AUTH).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("\"field\":\"n\""), "{text}");
    server.running.shutdown().await;
}

/// The engine on a fake clock: a minute later the last minute is empty;
/// limits a request sends itself and refunds are not counted.
#[tokio::test]
async fn the_engines_summaries_follow_its_clock() {
    use std::time::Duration;
    use tollgate::{FakeClock, MemoryBackend};
    use tollgate_server::config::Config;
    use tollgate_server::engine::{CheckRequest, DescriptorRequest, Engine, LimitOverride};

    let clock = FakeClock::new();
    let engine = Engine::new(
        Config::parse("limits.yaml", CONFIG).unwrap(),
        MemoryBackend::new(),
    )
    .with_top(TopConfig::default(), clock.clone());
    let request = |descriptor: DescriptorRequest| CheckRequest {
        domain: "api".into(),
        descriptors: vec![descriptor],
        hits: 1,
    };
    let ada = DescriptorRequest::new([("user", "ada")]);
    engine.check(&request(ada.clone())).await.unwrap();
    let refund = DescriptorRequest {
        negative: true,
        ..ada.clone()
    };
    engine.check(&request(refund)).await.unwrap();
    let sent = DescriptorRequest {
        limit: Some(LimitOverride {
            requests_per_unit: 5,
            period_ns: 1_000_000_000,
        }),
        ..DescriptorRequest::new([("user", "invented")])
    };
    engine.check(&request(sent)).await.unwrap();

    // Every limit of the file has its summary from the start; the limit
    // the request sent itself has none.
    let rules = engine.top().rules();
    let names: Vec<&str> = rules.iter().map(|(name, _)| &**name).collect();
    assert_eq!(names, ["api.tenant", "api.user"]);
    let minute = 60_000_000_000;
    let tenant = rules[0].1.report(engine.top_now(), minute, 10);
    assert_eq!(tenant.totals.total(), 0);
    let report = rules[1].1.report(engine.top_now(), minute, 10);
    assert_eq!(report.totals.total(), 1);
    assert_eq!(report.keys[0].key, "api/user=ada");
    clock.advance(Duration::from_secs(61));
    let report = rules[1].1.report(engine.top_now(), minute, 10);
    assert_eq!(report.totals.total(), 0);
    assert!(report.keys.is_empty());
}

/// The reverse proxy's HTTP rules count their keys in the same summaries,
/// named by rule.
#[tokio::test]
async fn the_proxys_rules_are_in_v1_top() {
    const RULES: &str = "
http:
  rules:
    - name: per-ip
      limit: { unit: minute, requests_per_unit: 2 }
";
    let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let server = support::start_with(RULES, move |o| {
        o.grpc = None;
        o.proxy = Some(tollgate_server::server::ProxyOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            upstream,
            timeout: std::time::Duration::from_secs(30),
        });
    })
    .await;
    let proxied = format!("http://{}/", server.running.proxy.unwrap());
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(support::get(&proxied).await.0);
    }
    assert_eq!(statuses, [200, 200, 429, 429, 429]);

    let (status, text) = support::get(&server.http_url("/v1/top")).await;
    assert_eq!(status, 200, "{text}");
    let top: Value = serde_json::from_str(&text).unwrap();
    let per_ip = rule(&top, "per-ip");
    assert_eq!(per_ip["limit"]["requests"], 2);
    let client = key(&per_ip["windows"][0], "ip=127.0.0.1");
    assert_eq!(
        (client["admitted"].as_u64(), client["refused"].as_u64()),
        (Some(2), Some(3))
    );
    assert_eq!(client["error"], 0);
    server.running.shutdown().await;
}
