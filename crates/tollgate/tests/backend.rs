//! The memory store behind the `Backend` trait, through the `Store` facade.

use tollgate::{
    Algorithm, BackendError, FakeClock, Limit, Limiter, MemoryBackend, Policy, Quota, Store,
};

#[tokio::test]
async fn store_over_memory_decides_like_the_limiter() {
    let policy = Policy::with_limits(vec![
        Limit::new(Algorithm::SlidingCounter, Quota::per_second(5).unwrap()),
        Limit::new(
            Algorithm::Gcra,
            Quota::per_minute(100).unwrap().with_burst(3).unwrap(),
        ),
    ])
    .unwrap();
    let clock = FakeClock::at(42);
    let store = Store::new(policy.clone(), MemoryBackend::with_clock(clock.clone())).unwrap();
    let limiter: Limiter<String, FakeClock> = Limiter::builder(policy).clock(clock).build();
    for cost in [1, 0, 2, 1, 1, 4, 0] {
        assert_eq!(
            store.check_cost("user", cost).await.unwrap(),
            limiter.check_cost("user", cost)
        );
    }
    store.reset("user").await.unwrap();
    assert!(limiter.reset("user"));
    assert_eq!(store.peek("user").await.unwrap(), limiter.peek("user"));
}

#[tokio::test]
async fn policies_do_not_share_keys() {
    let backend = MemoryBackend::new();
    let one = Store::new(
        Limit::new(Algorithm::FixedWindow, Quota::per_hour(1).unwrap()),
        &backend,
    )
    .unwrap();
    let two = Store::new(
        Limit::new(Algorithm::FixedWindow, Quota::per_hour(2).unwrap()),
        &backend,
    )
    .unwrap();
    assert!(one.check("k").await.unwrap().allowed);
    assert!(!one.check("k").await.unwrap().allowed);
    assert!(two.check("k").await.unwrap().allowed);
}

#[tokio::test]
async fn an_empty_key_is_refused() {
    let store = Store::new(
        Limit::new(Algorithm::Gcra, Quota::per_second(1).unwrap()),
        MemoryBackend::new(),
    )
    .unwrap();
    assert!(matches!(
        store.check("").await,
        Err(BackendError::InvalidKey(_))
    ));
}
