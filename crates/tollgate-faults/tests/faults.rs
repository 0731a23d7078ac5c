//! Breaking real Redis servers under the resilience layers: paused,
//! killed and restarted, slowed or silenced through a proxy, a cluster
//! primary killed, and a fleet of processes sharing a hot key through
//! batched reservations. One test binary, each test a few seconds.
//!
//! Calls are timed only to check that nothing outlives its deadline by
//! more than a generous margin (the machine may be busy).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use tollgate::{
    Algorithm, Backend, BackendError, BackendExt, BreakerConfig, BreakerState, FailurePolicy,
    Limit, OnStoreError, Policy, Quota, Resilient,
};
use tollgate_faults::{Fault, Proxy};
use tollgate_redis::harness::{skip_requested, RedisCluster, RedisServer};
use tollgate_redis::{RedisBackend, RedisConfig};

const DEADLINE: Duration = Duration::from_millis(50);
/// What a call may take beyond its deadline on a busy shared machine (CI
/// runs every test binary at once on two cores); the faults the deadlines
/// cut short last far longer than deadline + margin.
const MARGIN: Duration = Duration::from_millis(750);

fn server() -> Option<RedisServer> {
    if skip_requested() {
        return None;
    }
    Some(RedisServer::start().unwrap_or_else(|e| panic!("{e}")))
}

fn limit(algorithm: Algorithm, per_minute: u64) -> Policy {
    Limit::new(algorithm, Quota::per_minute(per_minute).unwrap()).into()
}

/// A backend whose own deadline is long: the layer's deadline is tested.
async fn redis(url: &str, prefix: &str) -> RedisBackend {
    RedisConfig::new(url)
        .prefix(prefix)
        .timeout(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect")
}

/// A breaker that never opens, to see every call reach the store.
fn never_opens() -> BreakerConfig {
    BreakerConfig::default()
        .consecutive(0)
        .failure_ratio(2.0, 1, Duration::from_secs(1))
}

/// Runs `call`, asserts it ended within `deadline` + [`MARGIN`].
async fn timed<T>(deadline: Duration, call: impl std::future::Future<Output = T>) -> T {
    let start = Instant::now();
    let out = call.await;
    let took = start.elapsed();
    assert!(took <= deadline + MARGIN, "a call took {took:?}");
    out
}

fn is_failure(e: &BackendError) -> bool {
    matches!(e, BackendError::Timeout(_) | BackendError::Unavailable(_))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_costs_at_most_the_deadline_and_each_policy_fails_as_configured() {
    let Some(server) = server() else { return };
    let open = limit(Algorithm::Gcra, 600);
    let closed = limit(Algorithm::FixedWindow, 600);
    let fallback = limit(Algorithm::TokenBucket, 40);
    let layer = Resilient::builder(redis(&server.url(), "paused:").await)
        .name("paused")
        .breaker(
            BreakerConfig::default()
                .consecutive(3)
                .open_for(Duration::from_millis(300))
                .probes(1),
        )
        .policy(open.clone(), FailurePolicy::new(OnStoreError::Open))
        .policy(closed.clone(), FailurePolicy::new(OnStoreError::Closed))
        .policy(
            fallback.clone(),
            FailurePolicy::new(OnStoreError::Fallback { instances: 4 }),
        )
        .build();
    let (open, closed, fallback) = (
        layer.prepare(&open).unwrap(),
        layer.prepare(&closed).unwrap(),
        layer.prepare(&fallback).unwrap(),
    );
    for p in [&open, &closed, &fallback] {
        assert!(layer.check("k", p, 1).await.unwrap().allowed);
    }

    server.pause().unwrap();
    let mut fallback_admitted = 0;
    for _ in 0..30 {
        let d = timed(DEADLINE, layer.check("k", &open, 1)).await.unwrap();
        assert!(d.allowed, "fail open admits");
        let e = timed(DEADLINE, layer.check("k", &closed, 1))
            .await
            .unwrap_err();
        assert!(
            is_failure(&e),
            "fail closed refuses with a typed error: {e}"
        );
        let d = timed(DEADLINE, layer.check("k", &fallback, 1))
            .await
            .unwrap();
        fallback_admitted += u64::from(d.allowed);
    }
    assert_eq!(layer.breaker().state(), BreakerState::Open);
    let stats = layer.stats();
    assert!(stats.store_failures >= 3, "{stats:?}");
    assert!(stats.short_circuited > 60, "{stats:?}");
    assert_eq!(stats.failed_open, 30);
    assert_eq!(stats.failed_closed, 30);
    // 40 a minute over 4 instances: a burst of 10 here.
    assert_eq!(fallback_admitted, 10);

    server.resume().unwrap();
    let back = Instant::now();
    while layer.check("k", &closed, 1).await.is_err() {
        assert!(
            back.elapsed() < Duration::from_secs(3),
            "the store never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(layer.breaker().state(), BreakerState::Closed);
    let calls = layer.stats().store_calls;
    layer.check("k", &open, 1).await.unwrap();
    assert_eq!(
        layer.stats().store_calls,
        calls + 1,
        "decided by the store again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_restarted_on_its_port_serves_again_within_a_second() {
    let Some(mut server) = server() else { return };
    let policy = limit(Algorithm::SlidingCounter, 1000);
    let deadline = Duration::from_millis(250);
    let backend = RedisConfig::new(server.url())
        .prefix("restart:")
        .timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    assert!(backend.uses_functions());
    let layer = Resilient::builder(backend)
        .breaker(never_opens())
        .default_policy(FailurePolicy::new(OnStoreError::Closed).deadline(deadline))
        .build();
    let policy = layer.prepare(&policy).unwrap();
    // The first call may outlast the short deadline on a busy machine; what
    // is tested starts once the store has answered.
    let warm = Instant::now();
    while let Err(e) = layer.check("k", &policy, 1).await {
        assert!(
            warm.elapsed() < Duration::from_secs(10),
            "never answered: {e}"
        );
    }

    server.kill();
    let mut answered = 0;
    for _ in 0..10 {
        let e = timed(deadline, layer.check("k", &policy, 1))
            .await
            .unwrap_err();
        assert!(is_failure(&e), "{e}");
        answered += 1;
    }
    assert_eq!(answered, 10, "every request got an answer");

    server.restart().unwrap();
    let answering = Instant::now();
    let mut first_ok = None;
    while first_ok.is_none() && answering.elapsed() < Duration::from_secs(5) {
        match timed(deadline, layer.check("k", &policy, 1)).await {
            Ok(d) => first_ok = Some((answering.elapsed(), d)),
            Err(e) => assert!(is_failure(&e), "{e}"),
        }
    }
    let (after, decision) = first_ok.expect("the store serves again");
    assert!(
        after < Duration::from_secs(1),
        "served again after {after:?}"
    );
    assert!(decision.allowed);
    let functions = server.cli(&["function", "list"]).unwrap();
    assert!(
        functions.contains(tollgate_redis::FUNCTION),
        "library reloaded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_below_the_deadline_passes_and_above_it_fails_fast_and_typed() {
    let Some(server) = server() else { return };
    let upstream = format!("127.0.0.1:{}", server.port()).parse().unwrap();
    let proxy = Proxy::start(upstream).await.unwrap();
    // Far from the latencies tried, so a busy machine does not blur them.
    let deadline = Duration::from_millis(200);
    let layer = Resilient::builder(redis(&proxy.url(), "latency:").await)
        .breaker(never_opens())
        .default_policy(FailurePolicy::new(OnStoreError::Closed).deadline(deadline))
        .build();
    let policy = limit(Algorithm::LeakyBucket, 100_000);
    let policy = layer.prepare(&policy).unwrap();

    proxy.set(Fault::Delay(Duration::from_millis(20)));
    for _ in 0..20 {
        assert!(layer.check("k", &policy, 1).await.unwrap().allowed);
    }
    // Longer than the deadline plus the margin, so waiting it out would fail.
    proxy.set(Fault::Delay(Duration::from_secs(2)));
    for _ in 0..5 {
        let e = timed(deadline, layer.check("k", &policy, 1))
            .await
            .unwrap_err();
        assert!(
            matches!(e, BackendError::Timeout(d) if d == deadline),
            "{e}"
        );
    }
    proxy.set(Fault::BlackHole);
    for _ in 0..5 {
        let e = timed(deadline, layer.check("k", &policy, 1))
            .await
            .unwrap_err();
        assert!(matches!(e, BackendError::Timeout(_)), "{e}");
    }
    proxy.set(Fault::None);
    // Late replies of the timed-out calls drain first.
    let back = Instant::now();
    while layer.check("k", &policy, 1).await.is_err() {
        assert!(back.elapsed() < Duration::from_secs(10), "never recovered");
    }
    for _ in 0..20 {
        assert!(layer.check("k", &policy, 1).await.unwrap().allowed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_a_store_that_accepts_and_never_answers_ends_at_the_connect_deadline() {
    let Some(server) = server() else { return };
    let upstream = format!("127.0.0.1:{}", server.port()).parse().unwrap();
    let proxy = Proxy::start(upstream).await.unwrap();
    proxy.set(Fault::BlackHole);
    let connect = Duration::from_millis(300);
    let result = timed(
        connect,
        RedisConfig::new(proxy.url())
            .connect_timeout(connect)
            .connect(),
    )
    .await;
    let e = result.err().expect("no connection to a silent store");
    assert!(matches!(e, BackendError::Timeout(_)), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_cluster_primary_fails_its_slots_only() {
    if skip_requested() {
        return;
    }
    let cluster = RedisCluster::start().unwrap_or_else(|e| panic!("{e}"));
    let backend = RedisConfig::new(cluster.url())
        .prefix("cl:")
        .timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let policy = limit(Algorithm::Gcra, 1000);
    let prepared = backend.prepare(&policy).unwrap();
    let dead = &cluster.nodes()[1];
    let mut on_dead = BTreeMap::new();
    for k in 0..24 {
        let key = format!("user-{k}");
        backend.check(&key, &prepared, 1).await.unwrap();
        let redis_key = backend.redis_keys(&key, &policy).unwrap().remove(0);
        let owner = dead.cli(&["cluster", "keyslot", &redis_key]).unwrap();
        let slot = owner.trim().to_string();
        let held = dead.cli(&["cluster", "countkeysinslot", &slot]).unwrap();
        on_dead.insert(key, held.trim() != "0");
    }
    assert!(on_dead.values().any(|&d| d) && on_dead.values().any(|&d| !d));

    let deadline = Duration::from_millis(400);
    let layer = Resilient::builder(backend)
        .breaker(never_opens())
        .default_policy(FailurePolicy::new(OnStoreError::Closed).deadline(deadline))
        .build();
    let prepared = layer.prepare(&policy).unwrap();
    // DEBUG SEGFAULT crashes the node (the reply never comes).
    let _ = dead.cli(&["debug", "segfault"]);
    for (key, dead_slot) in &on_dead {
        let result = timed(deadline, layer.check(key, &prepared, 1)).await;
        match result {
            Err(e) => {
                assert!(*dead_slot, "{key} on a live primary failed: {e}");
                // The cluster client may give up with the MOVED reply that
                // points at the dead node: a store error, still typed.
                assert!(e.is_store_failure(), "{e}");
            }
            Ok(d) => {
                assert!(!*dead_slot, "{key} on the dead primary answered");
                assert!(d.allowed);
            }
        }
    }
}

/// Runs `instances` batch workers at once and returns their admissions per
/// Unix second (summed) and their store calls.
fn fleet(url: &str, instances: usize, batch: u64, seconds: u64) -> (BTreeMap<u64, u64>, u64) {
    let workers: Vec<_> = (0..instances)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_batch-worker"))
                .args([url, &batch.to_string(), "1000", &seconds.to_string(), "100"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("start batch-worker")
        })
        .collect();
    let mut per_second = BTreeMap::new();
    let mut calls = 0;
    for worker in workers {
        let out = worker.wait_with_output().unwrap();
        assert!(out.status.success(), "worker failed");
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let fields: Vec<u64> = line
                .split(' ')
                .skip(1)
                .map(|f| f.parse().unwrap())
                .collect();
            match line.split(' ').next() {
                Some("second") => *per_second.entry(fields[0]).or_default() += fields[1],
                Some("total") => calls += fields[2],
                _ => panic!("unexpected worker output {line:?}"),
            }
        }
    }
    (per_second, calls)
}

#[test]
fn four_processes_batching_a_hot_key_stay_within_the_bound_with_fewer_store_calls() {
    let Some(server) = server() else { return };
    let (instances, batch, limit) = (4, 10, 100);
    let (per_second, batched_calls) = fleet(&server.url(), instances, batch, 3);
    let bound = limit + instances as u64 * batch;
    for (second, admitted) in &per_second {
        assert!(*admitted <= bound, "second {second}: {admitted} > {bound}");
    }
    assert!(per_second.values().any(|&a| a >= limit), "{per_second:?}");
    let (_, direct_calls) = fleet(&server.url(), instances, 1, 3);
    assert!(
        batched_calls * batch <= direct_calls,
        "batched {batched_calls} store calls, direct {direct_calls}"
    );
}
