//! Batched leases of hot keys in `serve` (the file's `store.batch`), on a
//! real Redis: fewer calls to the store, the same limit, and the unspent
//! units given back at shutdown. Needs `redis-server`
//! (TOLLGATE_SKIP_REDIS=1 skips, saying so).

mod support;

use tollgate_redis::harness::{skip_requested, RedisServer};

const LIMIT: u64 = 100;

fn config(batch: &str) -> String {
    format!(
        "
domain: b
descriptors:
  - key: user
    # tollgate's form: envoyproxy/ratelimit's counting charges every hit in
    # the store, so only tollgate's counting can lease.
    rate_limit: {{ algorithm: fixed_window, unit: hour, requests_per_unit: {LIMIT} }}
{batch}"
    )
}

const BATCHED: &str = "store:
  batch: { size: 10, hot_rate: 5, lease_ttl: 1h }
";

/// `n` checks of `ada` over HTTP: how many were admitted.
async fn admitted(server: &support::TestServer, n: usize) -> usize {
    let body = r#"{"domain":"b","descriptors":[{"entries":[{"key":"user","value":"ada"}]}]}"#;
    let mut ok = 0;
    for _ in 0..n {
        let (status, _, _) = support::send("POST", &server.http_url("/v1/check"), body).await;
        assert!(status == 200 || status == 429, "{status}");
        ok += usize::from(status == 200);
    }
    ok
}

#[tokio::test]
async fn a_hot_key_is_leased_in_batches_and_its_rest_given_back_at_shutdown() {
    if skip_requested() {
        eprintln!("TOLLGATE_SKIP_REDIS=1: the batched lease test is skipped");
        return;
    }
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let start = |yaml: String| {
        let url = redis.url();
        async move {
            support::start_with(&yaml, |o| {
                o.store = url;
                o.grpc = None;
            })
            .await
        }
    };

    let server = start(config(BATCHED)).await;
    let before = redis.script_calls().unwrap();
    assert_eq!(admitted(&server, 25).await, 25);
    let calls = redis.script_calls().unwrap() - before;
    // Four calls before the key is hot, then one lease of ten per ten.
    assert!(calls <= 8, "25 requests made {calls} calls to Redis");
    let stats = server.running.engine.backend().batch_stats().unwrap();
    assert!(stats.leases >= 2, "{stats:?}");
    server.running.shutdown().await;

    // What was leased and not spent went back: an unbatched server finds
    // exactly the 25 admitted charged.
    let server = start(config("")).await;
    let left = LIMIT as usize - 25;
    assert_eq!(admitted(&server, left + 1).await, left);
    server.running.shutdown().await;

    // The limit holds with batching: 100 admitted of 130 from a fresh key.
    redis.cli(&["FLUSHALL"]).unwrap();
    let server = start(config(BATCHED)).await;
    assert_eq!(admitted(&server, 130).await, LIMIT as usize);
    server.running.shutdown().await;
}
