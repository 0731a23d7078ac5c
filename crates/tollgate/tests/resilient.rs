//! The resilience layer over a store that fails or hangs: deadlines on
//! tokio's paused clock, the breaker and fallback on a fake clock (no
//! sleeping anywhere).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Flaky, Health};
use tollgate::{
    Algorithm, Backend, BackendError, BackendExt, BreakerConfig, BreakerState, FailurePolicy,
    FakeClock, Limit, OnStoreError, Policy, Quota, Resilient,
};

fn api() -> Policy {
    Limit::new(Algorithm::FixedWindow, Quota::per_minute(100).unwrap()).into()
}

fn layer(on_error: OnStoreError) -> (Resilient<Arc<Flaky>, FakeClock>, Arc<Flaky>, FakeClock) {
    let clock = FakeClock::new();
    let flaky = Arc::new(Flaky::new(clock.clone()));
    let resilient = Resilient::builder(Arc::clone(&flaky))
        .clock(clock.clone())
        .breaker(
            BreakerConfig::default()
                .consecutive(3)
                .open_for(Duration::from_secs(1))
                .probes(2),
        )
        .default_policy(FailurePolicy::new(on_error).deadline(Duration::from_millis(50)))
        .build();
    (resilient, flaky, clock)
}

#[tokio::test(start_paused = true)]
async fn a_store_that_never_answers_times_out_at_the_deadline() {
    let (r, flaky, _) = layer(OnStoreError::Closed);
    let api = r.prepare(&api()).unwrap();
    flaky.set(Health::Hanging);
    let start = tokio::time::Instant::now();
    let err = r.check("k", &api, 1).await.unwrap_err();
    assert!(matches!(err, BackendError::Timeout(d) if d == Duration::from_millis(50)));
    assert_eq!(start.elapsed(), Duration::from_millis(50));
    // Every operation has the deadline, not only decisions.
    assert!(matches!(
        r.lease("k", &api, 5).await,
        Err(BackendError::Timeout(_))
    ));
    assert!(matches!(
        r.refund("k", &api, 1).await,
        Err(BackendError::Timeout(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn the_deadline_is_per_policy() {
    let clock = FakeClock::new();
    let flaky = Arc::new(Flaky::new(clock.clone()));
    let login: Policy = Limit::new(Algorithm::SlidingLog, Quota::per_minute(5).unwrap()).into();
    let r = Resilient::builder(Arc::clone(&flaky))
        .clock(clock)
        .policy(
            login.clone(),
            FailurePolicy::new(OnStoreError::Closed).deadline(Duration::from_millis(7)),
        )
        .build();
    let (login, api) = (r.prepare(&login).unwrap(), r.prepare(&api()).unwrap());
    flaky.set(Health::Hanging);
    let start = tokio::time::Instant::now();
    r.check("k", &login, 1).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_millis(7));
    r.check("k", &api, 1).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_millis(7 + 50));
}

#[tokio::test]
async fn the_breaker_opens_after_its_threshold_and_stops_calling_the_store() {
    let (r, flaky, _) = layer(OnStoreError::Closed);
    let api = r.prepare(&api()).unwrap();
    flaky.set(Health::Refusing);
    for _ in 0..3 {
        let err = r.check("k", &api, 1).await.unwrap_err();
        assert!(matches!(err, BackendError::Unavailable(_)));
        assert!(!err.is_short_circuit(), "the store itself refused: {err}");
    }
    assert_eq!(r.breaker().state(), BreakerState::Open);
    for _ in 0..100 {
        let err = r.check("k", &api, 1).await.unwrap_err();
        assert!(err.to_string().contains("circuit open"), "{err}");
        assert!(err.is_short_circuit(), "{err}");
    }
    assert_eq!(flaky.calls(), 3, "no call reaches the store while open");
    let stats = r.stats();
    assert_eq!((stats.store_calls, stats.store_failures), (3, 3));
    assert_eq!((stats.short_circuited, stats.failed_closed), (100, 103));
}

#[tokio::test]
async fn fail_open_admits_and_counts() {
    let (r, flaky, _) = layer(OnStoreError::Open);
    let api = r.prepare(&api()).unwrap();
    flaky.set(Health::Refusing);
    for _ in 0..500 {
        assert!(r.check("k", &api, 1).await.unwrap().allowed);
    }
    assert_eq!(r.stats().failed_open, 500);
    assert_eq!(flaky.calls(), 3);
}

#[tokio::test]
async fn fallback_holds_this_instances_share_of_the_limit() {
    let (r, flaky, _) = layer(OnStoreError::Fallback { instances: 4 });
    let api = r.prepare(&api()).unwrap();
    flaky.set(Health::Refusing);
    let mut admitted = 0;
    for _ in 0..100 {
        admitted += u64::from(r.check("k", &api, 1).await.unwrap().allowed);
    }
    assert_eq!(admitted, 25, "100 a minute over 4 instances");
    assert_eq!(r.stats().fallback, 100);
    // Other keys have their own share.
    assert!(r.check("other", &api, 1).await.unwrap().allowed);
}

#[tokio::test]
async fn decisions_go_back_to_the_store_once_the_probes_succeed() {
    let (r, flaky, clock) = layer(OnStoreError::Fallback { instances: 2 });
    let api = r.prepare(&api()).unwrap();
    flaky.set(Health::Refusing);
    for _ in 0..10 {
        r.check("k", &api, 1).await.unwrap();
    }
    flaky.set(Health::Up);
    assert_eq!(flaky.calls(), 3, "still open");
    clock.advance(Duration::from_secs(1));
    r.check("k", &api, 1).await.unwrap();
    assert_eq!(r.breaker().state(), BreakerState::HalfOpen);
    r.check("k", &api, 1).await.unwrap();
    assert_eq!(r.breaker().state(), BreakerState::Closed);
    let before = flaky.calls();
    let decision = r.check("k", &api, 1).await.unwrap();
    assert_eq!(flaky.calls(), before + 1);
    // The store saw only its own three charges: the fallback's stay apart.
    assert_eq!(decision.remaining, 97);
}

#[tokio::test]
async fn a_failed_probe_keeps_the_store_alone_for_another_period() {
    let (r, flaky, clock) = layer(OnStoreError::Closed);
    let api = r.prepare(&api()).unwrap();
    flaky.set(Health::Refusing);
    for _ in 0..3 {
        r.check("k", &api, 1).await.unwrap_err();
    }
    clock.advance(Duration::from_secs(1));
    r.check("k", &api, 1).await.unwrap_err();
    assert_eq!(flaky.calls(), 4, "one probe");
    assert_eq!(r.breaker().state(), BreakerState::Open);
    r.check("k", &api, 1).await.unwrap_err();
    assert_eq!(flaky.calls(), 4);
}

#[tokio::test]
async fn the_callers_errors_pass_through_and_do_not_trip_the_breaker() {
    let (r, flaky, _) = layer(OnStoreError::Open);
    let api = r.prepare(&api()).unwrap();
    for _ in 0..10 {
        let err = r.check("", &api, 1).await.unwrap_err();
        assert!(matches!(err, BackendError::InvalidKey(_)), "{err}");
    }
    assert_eq!(r.breaker().state(), BreakerState::Closed);
    assert_eq!(r.stats().failed_open, 0);
    assert_eq!(flaky.calls(), 10);
}

#[test]
fn over_a_store_that_decides_at_once_it_decides_at_once_with_no_timer() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    use tollgate::{BatchConfig, Batched, MemoryBackend};

    let memory = Resilient::builder(MemoryBackend::new()).build();
    assert!(memory.decides_at_once());
    let batched = Batched::new(MemoryBackend::new(), BatchConfig::default());
    assert!(!Resilient::builder(batched).build().decides_at_once());
    // No runtime here: a deadline's timer would need tokio's time driver
    // (and panic without one), so the decision shows that none was set.
    let api = memory.prepare(&api()).unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    let mut check = || match std::pin::pin!(memory.check("k", &api, 40)).poll(&mut cx) {
        Poll::Ready(Ok(d)) => (d.allowed, d.remaining),
        other => panic!("not decided at the first poll: {other:?}"),
    };
    assert_eq!(check(), (true, 60));
    assert_eq!(check(), (true, 20));
    assert_eq!(check(), (false, 20));
}
