//! The same descriptors through the memory store, a real Redis and a real
//! PostgreSQL give the same decisions. Needs `redis-server` and PostgreSQL's
//! binaries (TOLLGATE_SKIP_REDIS=1 / TOLLGATE_SKIP_POSTGRES=1 skip, saying so).

mod support;

use tollgate_postgres::harness::PgServer;
use tollgate_redis::harness::{skip_requested, RedisServer};
use tollgate_server::engine::{CheckRequest, DescriptorRequest};

const CONFIG: &str = "
domain: s
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 3 }
  - key: org
    rate_limit:
      limits:
        - { algorithm: gcra, unit: hour, requests_per_unit: 4 }
        - { algorithm: token_bucket, unit: day, requests_per_unit: 100, burst: 5 }
  - key: free
    value: yes
    rate_limit: { algorithm: sliding_counter, period: 90m, requests_per_unit: 2 }
  - key: health
    rate_limit: { unlimited: true }
";

/// The calls: several keys, hits above one, a peek and a refund.
fn script() -> Vec<CheckRequest> {
    let one = |k: &str, v: &str, hits: Option<u64>, negative: bool| CheckRequest {
        domain: "s".into(),
        descriptors: vec![DescriptorRequest {
            hits,
            negative,
            ..DescriptorRequest::new([(k, v)])
        }],
        hits: 1,
    };
    let mut calls = Vec::new();
    for _ in 0..5 {
        calls.push(one("user", "ada", None, false));
        calls.push(one("org", "acme", Some(2), false));
        calls.push(one("free", "yes", None, false));
        calls.push(one("health", "x", None, false));
    }
    calls.push(one("user", "ada", Some(0), false));
    calls.push(one("user", "ada", Some(2), true));
    calls.push(one("user", "ada", None, false));
    calls
}

/// What a decision says, without the durations (each store has its clock).
async fn run(store: &str) -> Vec<String> {
    let server = support::start_with(CONFIG, |o| {
        o.store = store.to_string();
        o.grpc = None;
    })
    .await;
    let mut seen = Vec::new();
    for call in script() {
        let r = server.running.engine.check(&call).await.unwrap();
        let s = &r.statuses[0];
        seen.push(format!("{:?} {:?} {:?}", r.overall, s.remaining, s.limit));
    }
    server.running.shutdown().await;
    seen
}

#[tokio::test]
async fn memory_and_redis_decide_alike() {
    if skip_requested() {
        eprintln!("TOLLGATE_SKIP_REDIS=1: the memory/Redis comparison is skipped");
        return;
    }
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let memory = run("memory").await;
    let shared = run(&redis.url()).await;
    assert_eq!(memory, shared);
    assert!(
        memory.iter().any(|d| d.starts_with("OverLimit")),
        "the script must reach the limits"
    );
}

#[tokio::test]
async fn memory_and_postgres_decide_alike() {
    if tollgate_postgres::harness::skip_requested() {
        eprintln!("TOLLGATE_SKIP_POSTGRES=1: the memory/PostgreSQL comparison is skipped");
        return;
    }
    let postgres = PgServer::start().unwrap_or_else(|e| panic!("{e}"));
    let memory = run("memory").await;
    let shared = run(&postgres.url()).await;
    assert_eq!(memory, shared);
}
