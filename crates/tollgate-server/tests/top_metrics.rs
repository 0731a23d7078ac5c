//! `detailed_metric` series through a running server's `/metrics`: 5,000
//! distinct values and 3 heavy hitters give at most N + 1 series (the
//! current top N and `:other`) naming the heavy hitters; when other values
//! become the heavy hitters the series follow them, every series only
//! grows while it exists, and the series always add up to every hit. And a
//! descriptor marked `secret: true` never shows its values: not in
//! `/metrics`, `/v1/top` or `/top`, only their digests.

mod support;

use std::collections::HashMap;

use support::{get, send};
use tollgate_http::digest;

/// The series each `detailed_metric` limit gets beyond `:other`.
const N: usize = 3;

const CONFIG: &str = "
domain: web
descriptors:
  - key: tenant
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 1000000 }
  - key: api_key
    secret: true
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 5 }
";

/// One request of `(value, hits)` descriptors of `key`.
async fn check(url: &str, key: &str, values: &[(String, u64)]) {
    let descriptors: Vec<String> = values
        .iter()
        .map(|(v, hits)| {
            format!(r#"{{"entries":[{{"key":"{key}","value":"{v}"}}],"hits":{hits}}}"#)
        })
        .collect();
    let body = format!(
        r#"{{"domain":"web","descriptors":[{}]}}"#,
        descriptors.join(",")
    );
    let (status, text, _) = send("POST", url, &body).await;
    assert!(status == 200 || status == 429, "{status}: {text}");
}

/// The page's `tollgate_server_hits_total` series of `web.tenant`, by
/// label, after checking the page names each family once.
async fn scrape(server: &support::TestServer) -> HashMap<String, u64> {
    let (status, page) = get(&server.http_url("/metrics")).await;
    assert_eq!(status, 200);
    for family in [
        "tollgate_server_hits_total",
        "ratelimit_service_rate_limit_total_hits",
    ] {
        let types = page.matches(&format!("# TYPE {family} counter\n")).count();
        assert_eq!(types, 1, "{family} must be one family: {page}");
    }
    let prefix = "tollgate_server_hits_total{rule=\"web.tenant";
    page.lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .map(|l| {
            let (label, count) = l.split_once("\"} ").expect("a sample line");
            (label.to_string(), count.parse().expect("a count"))
        })
        .collect()
}

#[tokio::test]
async fn series_follow_the_current_heavy_hitters() {
    tollgate_server::metrics::bound_detailed_series(N);
    let server = support::start(CONFIG).await;
    let url = server.http_url("/v1/check");
    // 5,000 values once each, and `h0`..`h2` 40 hits in each of 50
    // requests: 2,000 each.
    let mut total = 0;
    for r in 0..50 {
        let mut values: Vec<(String, u64)> =
            (0..100).map(|i| (format!("v{}", r * 100 + i), 1)).collect();
        values.extend((0..3).map(|h| (format!("h{h}"), 40)));
        total += 100 + 3 * 40;
        check(&url, "tenant", &values).await;
    }
    let first = scrape(&server).await;
    assert!(first.len() <= N + 1, "{first:#?}");
    for h in ["_h0", "_h1", "_h2"] {
        assert!(first.contains_key(h), "{h} has no series: {first:#?}");
    }
    assert_eq!(first.values().sum::<u64>(), total, "{first:#?}");

    // New heavy hitters, busier than the old ones within the minute.
    let heavy: Vec<(String, u64)> = (0..3).map(|h| (format!("n{h}"), 1_000)).collect();
    for _ in 0..5 {
        check(&url, "tenant", &heavy).await;
        total += 3_000;
    }
    let second = scrape(&server).await;
    assert!(second.len() <= N + 1, "{second:#?}");
    for n in ["_n0", "_n1", "_n2"] {
        assert!(second.contains_key(n), "{n} has no series: {second:#?}");
    }
    for h in ["_h0", "_h1", "_h2"] {
        assert!(!second.contains_key(h), "{h} kept its series: {second:#?}");
    }
    assert_eq!(second.values().sum::<u64>(), total, "{second:#?}");
    assert!(second[":other"] >= first[":other"], "`:other` went down");

    // The followers count from then on, and only grow.
    check(&url, "tenant", &heavy).await;
    total += 3_000;
    let third = scrape(&server).await;
    for n in ["_n0", "_n1", "_n2"] {
        assert_eq!(third[n], second[n] + 1_000, "{third:#?}");
    }
    assert_eq!(third[":other"], second[":other"]);
    assert_eq!(third.values().sum::<u64>(), total, "{third:#?}");
    server.running.shutdown().await;
}

#[tokio::test]
async fn secret_values_are_shown_only_as_their_digest() {
    tollgate_server::metrics::bound_detailed_series(N);
    let server = support::start(CONFIG).await;
    let url = server.http_url("/v1/check");
    let secret = "sk-live-8c1f5e0b";
    for _ in 0..8 {
        check(&url, "api_key", &[(secret.to_string(), 1)]).await;
    }
    let hidden = digest(secret.as_bytes());
    let (_, top) = get(&server.http_url("/v1/top")).await;
    let (_, page) = get(&server.http_url("/top")).await;
    let (_, metrics) = get(&server.http_url("/metrics")).await;
    for (what, text) in [("/v1/top", &top), ("/top", &page), ("/metrics", &metrics)] {
        assert!(!text.contains(secret), "{what} shows the secret: {text}");
    }
    assert!(top.contains(&format!("\"web/api_key={hidden}\"")), "{top}");
    // 8 hits, 5 admitted, 3 refused: counted under the digest from the
    // second (the first, a one-off then, is in `:other`).
    let series = format!("tollgate_server_hits_total{{rule=\"web.api_key_{hidden}\"}} 7");
    assert!(metrics.contains(&series), "{metrics}");
    assert!(metrics.contains("tollgate_server_hits_total{rule=\"web.api_key:other\"} 1"));
    let refused = format!("tollgate_server_over_limit_total{{rule=\"web.api_key_{hidden}\"}} 3");
    assert!(metrics.contains(&refused), "{metrics}");
    server.running.shutdown().await;
}
