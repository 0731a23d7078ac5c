//! Hot reload: a valid change, an invalid file, a removed rule, state kept
//! for unchanged rules, the file watcher, and requests in flight finishing
//! under the configuration they started with.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tollgate::{Backend, BackendError, MemoryBackend, Operation, Outcome, Policy};
use tollgate_server::config::Config;
use tollgate_server::engine::{CheckRequest, Code, DescriptorRequest, Engine};
use tollgate_server::reload::reload;

const V1: &str = "
domain: d
descriptors:
  - key: a
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: b
    rate_limit: { unit: minute, requests_per_unit: 1 }
";

fn ask(key: &str) -> CheckRequest {
    CheckRequest {
        domain: "d".into(),
        descriptors: vec![DescriptorRequest::new([(key, "x")])],
        hits: 1,
    }
}

#[tokio::test]
async fn valid_change_invalid_file_and_removed_rule() {
    let server = support::start(V1).await;
    let engine = &server.running.engine;
    let path = server.config_path();
    assert_eq!(engine.check(&ask("a")).await.unwrap().overall, Code::Ok);
    assert_eq!(engine.check(&ask("b")).await.unwrap().overall, Code::Ok);
    assert_eq!(
        engine.check(&ask("a")).await.unwrap().overall,
        Code::OverLimit
    );

    // b changes, a does not: a keeps its state, b starts afresh.
    std::fs::write(&path, V1.replacen("requests_per_unit: 1 }\n  - key: b\n    rate_limit: { unit: minute, requests_per_unit: 1", "requests_per_unit: 1 }\n  - key: b\n    rate_limit: { unit: minute, requests_per_unit: 3", 1)).unwrap();
    reload(engine, &path).unwrap();
    assert_eq!(
        engine.check(&ask("a")).await.unwrap().overall,
        Code::OverLimit
    );
    let b = engine.check(&ask("b")).await.unwrap();
    assert_eq!(b.statuses[0].remaining, Some(2));

    // A broken file: the error is located, the running config stays.
    std::fs::write(&path, "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: lightyear, requests_per_unit: 1 }\n").unwrap();
    let err = reload(engine, &path).unwrap_err();
    assert_eq!(err.line, 4, "{err}");
    assert_eq!(
        engine.check(&ask("a")).await.unwrap().overall,
        Code::OverLimit
    );
    let (_, metrics) = support::get(&server.http_url("/metrics")).await;
    assert!(
        metrics.contains("tollgate_server_config_loads_total{result=\"error\"}"),
        "{metrics}"
    );

    // a removed: no limit any more.
    std::fs::write(&path, "domain: d\ndescriptors:\n  - key: b\n    rate_limit: { unit: minute, requests_per_unit: 3 }\n").unwrap();
    reload(engine, &path).unwrap();
    let a = engine.check(&ask("a")).await.unwrap();
    assert_eq!(a.overall, Code::Ok);
    assert!(a.statuses[0].limit.is_none());
    server.running.shutdown().await;
}

#[tokio::test]
async fn a_changed_file_is_picked_up_by_the_watcher() {
    let server = support::start_with(V1, |o| o.watch = true).await;
    let engine = Arc::clone(&server.running.engine);
    // `start` returns with the watch in place: no wait before the change.
    std::fs::write(server.config_path(), V1.replace("key: b", "key: c")).unwrap();
    let mut seen = false;
    for _ in 0..200 {
        if engine
            .config()
            .describe()
            .iter()
            .any(|l| l.starts_with("d.c:"))
        {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        seen,
        "the watcher never reloaded: {:?}",
        engine.config().describe()
    );
    server.running.shutdown().await;
}

/// A store whose checks and forced charges (envoyproxy/ratelimit's
/// counting) wait for a permit, to hold a request in flight.
struct Gated {
    inner: MemoryBackend,
    gate: Arc<Semaphore>,
    parked: Arc<AtomicUsize>,
}

impl Backend for Gated {
    type Prepared = <MemoryBackend as Backend>::Prepared;

    fn prepare(&self, policy: &Policy) -> Result<Self::Prepared, BackendError> {
        self.inner.prepare(policy)
    }

    async fn apply(
        &self,
        key: &str,
        policy: &Self::Prepared,
        op: Operation,
    ) -> Result<Outcome, BackendError> {
        let _permit = if matches!(op, Operation::Check(_) | Operation::Force(_)) {
            self.parked.fetch_add(1, Ordering::SeqCst);
            Some(self.gate.acquire().await.expect("the gate stays open"))
        } else {
            None
        };
        self.inner.apply(key, policy, op).await
    }
}

#[tokio::test]
async fn a_request_in_flight_finishes_under_its_configuration() {
    let gate = Arc::new(Semaphore::new(0));
    let parked = Arc::new(AtomicUsize::new(0));
    let backend = Gated {
        inner: MemoryBackend::new(),
        gate: Arc::clone(&gate),
        parked: Arc::clone(&parked),
    };
    let engine = Arc::new(Engine::new(Config::parse("v1", V1).unwrap(), backend));
    let in_flight = tokio::spawn({
        let engine = Arc::clone(&engine);
        async move { engine.check(&ask("a")).await.unwrap() }
    });
    // Wait until the request is parked at the store, its config loaded.
    while parked.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    engine.replace_config(
        Config::parse(
            "v2",
            &V1.replace("requests_per_unit: 1", "requests_per_unit: 7"),
        )
        .unwrap(),
    );
    gate.add_permits(10);
    let old = in_flight.await.unwrap();
    let limit = old.statuses[0].limit.as_ref().unwrap().limit.unwrap();
    assert_eq!(limit.quota.limit(), 1, "the request started under v1");
    let new = engine.check(&ask("b")).await.unwrap();
    assert_eq!(
        new.statuses[0]
            .limit
            .as_ref()
            .unwrap()
            .limit
            .unwrap()
            .quota
            .limit(),
        7
    );
}
