//! Batched reservations over process memory on a fake clock: store calls
//! drop by the batch factor, unspent units come back, and the overshoot of
//! several instances sharing a store stays within `instances * batch`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Flaky;
use proptest::prelude::*;
use tollgate::{
    Algorithm, Backend, BackendError, BackendExt, BatchConfig, Batched, Clock, FakeClock, Limit,
    MemoryBackend, Policy, Quota, Store,
};

type Shared = Arc<MemoryBackend<FakeClock>>;

fn policy(algorithm: Algorithm, limit: u64) -> Policy {
    Limit::new(algorithm, Quota::per_second(limit).unwrap()).into()
}

fn batched(store: &Shared, clock: &FakeClock, config: BatchConfig) -> Batched<Shared, FakeClock> {
    Batched::with_clock(Arc::clone(store), config, clock.clone())
}

#[tokio::test]
async fn a_hot_key_is_leased_and_store_calls_drop_by_the_batch_factor() {
    let clock = FakeClock::new();
    let store: Shared = Arc::new(MemoryBackend::with_clock(clock.clone()));
    let layer = batched(&store, &clock, BatchConfig::default().batch(10).hot_rate(5));
    let p = policy(Algorithm::FixedWindow, 10_000);
    let (sp, p) = (store.prepare(&p).unwrap(), layer.prepare(&p).unwrap());
    for _ in 0..1000 {
        assert!(layer.check("hot", &p, 1).await.unwrap().allowed);
        clock.advance(Duration::from_micros(100));
    }
    let stats = layer.stats();
    // 4 requests before the key is hot, then one lease per 10.
    assert_eq!(stats.store_calls, 4 + 100);
    assert_eq!(stats.leases, 100);
    assert_eq!(stats.local_decisions, 1000 - 104);
    // The store charged what was checked and leased: 4 units are still held.
    let remaining = || async { store.check("hot", &sp, 0).await.unwrap().remaining };
    assert_eq!(remaining().await, 10_000 - 1004);
    assert_eq!(layer.shutdown().await, 4);
    assert_eq!(remaining().await, 10_000 - 1000);
}

#[tokio::test]
async fn a_cold_key_goes_to_the_store_every_time() {
    let clock = FakeClock::new();
    let store: Shared = Arc::new(MemoryBackend::with_clock(clock.clone()));
    let layer = batched(&store, &clock, BatchConfig::default().hot_rate(5));
    let p = policy(Algorithm::Gcra, 100);
    let p = layer.prepare(&p).unwrap();
    for _ in 0..20 {
        layer.check("cold", &p, 1).await.unwrap();
        clock.advance(Duration::from_millis(300));
    }
    assert_eq!(layer.stats().leases, 0);
    assert_eq!(layer.stats().store_calls, 20);
}

#[tokio::test]
async fn unspent_units_are_refunded_when_the_lease_ages_out_and_on_shutdown() {
    let clock = FakeClock::new();
    let store: Shared = Arc::new(MemoryBackend::with_clock(clock.clone()));
    let config = BatchConfig::default()
        .batch(10)
        .hot_rate(0)
        .lease_ttl(Duration::from_millis(500));
    let layer = batched(&store, &clock, config);
    let p = policy(Algorithm::FixedWindow, 100);
    let (sp, p) = (store.prepare(&p).unwrap(), layer.prepare(&p).unwrap());
    for _ in 0..3 {
        layer.check("k", &p, 1).await.unwrap();
    }
    assert_eq!(store.check("k", &sp, 0).await.unwrap().remaining, 90);
    assert_eq!(layer.refund_expired().await, 0, "not aged yet");
    clock.advance(Duration::from_millis(500));
    assert_eq!(layer.refund_expired().await, 7);
    assert_eq!(store.check("k", &sp, 0).await.unwrap().remaining, 97);
    assert_eq!(layer.leases_held(), 0);
    // A new lease, given back at shutdown.
    layer.check("k", &p, 1).await.unwrap();
    assert_eq!(layer.shutdown().await, 9);
    assert_eq!(store.check("k", &sp, 0).await.unwrap().remaining, 96);
}

#[tokio::test]
async fn an_aged_lease_is_refunded_by_the_next_request_of_its_key() {
    let clock = FakeClock::new();
    let store: Shared = Arc::new(MemoryBackend::with_clock(clock.clone()));
    let config = BatchConfig::default()
        .batch(10)
        .hot_rate(0)
        .lease_ttl(Duration::from_millis(100));
    let layer = batched(&store, &clock, config);
    let p = policy(Algorithm::LeakyBucket, 1000);
    let p = layer.prepare(&p).unwrap();
    layer.check("k", &p, 1).await.unwrap();
    clock.advance(Duration::from_millis(100));
    layer.check("k", &p, 1).await.unwrap();
    let stats = layer.stats();
    assert_eq!(
        (stats.refunds, stats.refunded_units, stats.leases),
        (1, 9, 2)
    );
}

#[tokio::test]
async fn a_refused_lease_is_kept_as_a_denial_until_its_retry_after() {
    let clock = FakeClock::new();
    let store: Shared = Arc::new(MemoryBackend::with_clock(clock.clone()));
    let layer = batched(&store, &clock, BatchConfig::default().batch(5).hot_rate(0));
    // 10 a second: one unit every 100 ms.
    let p = policy(Algorithm::Gcra, 10);
    let p = layer.prepare(&p).unwrap();
    let mut admitted = 0;
    for _ in 0..30 {
        admitted += u64::from(layer.check("k", &p, 1).await.unwrap().allowed);
    }
    assert_eq!(admitted, 10);
    let calls = layer.stats().store_calls;
    // Two leases of 5, one refused lease; the rest were denied in process.
    assert_eq!(calls, 3);
    let denied = layer.check("k", &p, 1).await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after.as_nanos(), Some(100_000_000));
    clock.advance(Duration::from_millis(100));
    assert!(layer.check("k", &p, 1).await.unwrap().allowed);
}

#[tokio::test]
async fn the_number_of_leases_held_is_bounded() {
    let clock = FakeClock::new();
    let store: Shared = Arc::new(MemoryBackend::with_clock(clock.clone()));
    let config = BatchConfig::default().batch(10).hot_rate(0).max_leases(3);
    let layer = batched(&store, &clock, config);
    let p = policy(Algorithm::TokenBucket, 1000);
    let p = layer.prepare(&p).unwrap();
    for key in 0..10 {
        layer.check(&key.to_string(), &p, 1).await.unwrap();
    }
    assert_eq!(layer.leases_held(), 3);
    assert_eq!(layer.stats().leases, 3);
    assert_eq!(layer.stats().store_calls, 10);
}

#[tokio::test]
async fn the_sliding_log_is_refused_clearly_and_the_queue_goes_to_the_store() {
    let clock = FakeClock::new();
    let store: Shared = Arc::new(MemoryBackend::with_clock(clock.clone()));
    let layer = batched(&store, &clock, BatchConfig::default().hot_rate(0));
    let log = policy(Algorithm::SlidingLog, 10);
    let err = Store::new(log, &layer).err().expect("refused");
    assert!(matches!(err, BackendError::UnsupportedPolicy(_)));
    assert!(
        err.to_string().contains("sliding_log cannot lease"),
        "{err}"
    );
    let queue = layer.prepare(&policy(Algorithm::LeakyQueue, 10)).unwrap();
    for _ in 0..5 {
        layer.check("q", &queue, 1).await.unwrap();
    }
    assert_eq!(layer.stats().leases, 0);
}

#[tokio::test]
async fn a_failed_lease_reports_the_stores_error() {
    let clock = FakeClock::new();
    let flaky = Flaky::new(clock.clone());
    flaky.set(common::Health::Refusing);
    let layer = Batched::with_clock(flaky, BatchConfig::default().hot_rate(0), clock);
    let p = layer.prepare(&policy(Algorithm::Gcra, 10)).unwrap();
    let err = layer.check("k", &p, 1).await.unwrap_err();
    assert!(matches!(err, BackendError::Unavailable(_)));
}

/// Admissions per store window, per instance, for `requests` (instance,
/// gap in ms) on a fixed window of `limit` per second.
fn run_fleet(instances: usize, batch: u64, limit: u64, requests: &[(usize, u64)]) -> Vec<u64> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let clock = FakeClock::new();
        let store: Shared = Arc::new(MemoryBackend::with_clock(clock.clone()));
        let config = BatchConfig::default()
            .batch(batch)
            .hot_rate(0)
            .lease_ttl(Duration::from_millis(300));
        let fleet: Vec<_> = (0..instances)
            .map(|_| batched(&store, &clock, config))
            .collect();
        let p = policy(Algorithm::FixedWindow, limit);
        let prepared: Vec<_> = fleet.iter().map(|b| b.prepare(&p).unwrap()).collect();
        let mut per_second = vec![0u64; 1];
        for &(instance, gap) in requests {
            clock.advance(Duration::from_millis(gap));
            let second = usize::try_from(clock.now() / 1_000_000_000).unwrap();
            if per_second.len() <= second {
                per_second.resize(second + 1, 0);
            }
            let i = instance % instances;
            let d = fleet[i].check("k", &prepared[i], 1).await.unwrap();
            per_second[second] += u64::from(d.allowed);
        }
        per_second
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// However requests land on the instances, no window admits more than
    /// the limit plus `instances * batch`.
    #[test]
    fn overshoot_is_bounded_by_instances_times_batch(
        instances in 1usize..6,
        batch in 1u64..20,
        limit in 1u64..50,
        requests in proptest::collection::vec((0usize..6, 0u64..40), 1..600),
    ) {
        let per_second = run_fleet(instances, batch, limit, &requests);
        let bound = limit + instances as u64 * batch;
        for (second, admitted) in per_second.iter().enumerate() {
            prop_assert!(*admitted <= bound, "second {second}: {admitted} > {bound}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_of_a_key_wait_for_one_lease_instead_of_the_store() {
    let clock = FakeClock::new();
    let store: Shared = Arc::new(MemoryBackend::with_clock(clock.clone()));
    let layer = Arc::new(batched(
        &store,
        &clock,
        BatchConfig::default().batch(50).hot_rate(0),
    ));
    let p = policy(Algorithm::FixedWindow, 1_000_000);
    let p = layer.prepare(&p).unwrap();
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (layer, p) = (Arc::clone(&layer), p.clone());
            tokio::spawn(async move {
                for _ in 0..100 {
                    assert!(layer.check("k", &p, 1).await.unwrap().allowed);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let stats = layer.stats();
    assert_eq!(
        stats.store_calls, stats.leases,
        "no request went around the lease"
    );
    assert_eq!(stats.leases, 3200 / 50);
}

#[tokio::test(start_paused = true)]
async fn a_lease_dropped_on_its_way_wakes_the_requests_waiting_for_it() {
    let clock = FakeClock::new();
    let flaky = Arc::new(Flaky::new(clock.clone()));
    flaky.set(common::Health::Hanging);
    let layer = Batched::with_clock(
        Arc::clone(&flaky),
        BatchConfig::default().hot_rate(0),
        clock,
    );
    let p = policy(Algorithm::Gcra, 10);
    let p = layer.prepare(&p).unwrap();
    let deadline = Duration::from_millis(50);
    let leaser = tokio::time::timeout(deadline, layer.check("k", &p, 1));
    let waiter = async {
        tokio::task::yield_now().await;
        flaky.set(common::Health::Up);
        layer.check("k", &p, 1).await
    };
    let (leaser, waiter) = tokio::join!(leaser, waiter);
    assert!(leaser.is_err(), "the leaser ran out of time");
    assert!(waiter.unwrap().allowed, "the waiter leased in its turn");
}

#[tokio::test]
async fn a_policy_prepared_again_spends_the_same_lease() {
    let clock = FakeClock::new();
    let store: Shared = Arc::new(MemoryBackend::with_clock(clock.clone()));
    let layer = batched(&store, &clock, BatchConfig::default().batch(10).hot_rate(0));
    let p = policy(Algorithm::FixedWindow, 100);
    // As a reloaded configuration does.
    let (first, again) = (layer.prepare(&p).unwrap(), layer.prepare(&p).unwrap());
    assert!(layer.check("k", &first, 1).await.unwrap().allowed);
    assert!(layer.check("k", &again, 1).await.unwrap().allowed);
    assert_eq!(
        layer.stats().leases,
        1,
        "the second check spent the first's lease"
    );
    assert_eq!(layer.leases_held(), 1);
}
