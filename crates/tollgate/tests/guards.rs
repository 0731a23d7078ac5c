//! The concurrency limiter's permits are released on every way out: drop,
//! panic, and a cancelled task.

use std::sync::Arc;

use tollgate::ConcurrencyLimiter;

#[test]
fn permits_cap_in_flight_and_release_on_drop() {
    let limiter = ConcurrencyLimiter::new(3);
    let permits: Vec<_> = (0..3).map(|_| limiter.try_acquire("k").unwrap()).collect();
    assert_eq!(limiter.in_flight("k"), 3);
    assert_eq!(limiter.try_acquire("k").err().unwrap().in_flight, 3);
    assert!(limiter.try_acquire("other").is_ok(), "keys are independent");
    drop(permits);
    assert_eq!(limiter.in_flight("k"), 0);
}

#[test]
fn a_panic_releases_the_permit() {
    let limiter = ConcurrencyLimiter::new(1);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _permit = limiter.try_acquire("k").unwrap();
        panic!("handler failed");
    }));
    assert!(result.is_err());
    assert_eq!(limiter.in_flight("k"), 0);
    assert!(limiter.try_acquire("k").is_ok());
}

#[tokio::test]
async fn a_cancelled_task_releases_the_permit() {
    let limiter = Arc::new(ConcurrencyLimiter::new(1));
    let (started, is_started) = tokio::sync::oneshot::channel();
    let task = tokio::spawn({
        let limiter = Arc::clone(&limiter);
        async move {
            let _permit = limiter.try_acquire_owned("k").unwrap();
            started.send(()).unwrap();
            std::future::pending::<()>().await;
        }
    });
    is_started.await.unwrap();
    assert_eq!(limiter.in_flight("k"), 1);
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(limiter.in_flight("k"), 0);
}

#[test]
fn threads_never_exceed_the_cap() {
    let limiter = ConcurrencyLimiter::<String>::new(2);
    let peak = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..2_000 {
                    if let Ok(_p) = limiter.try_acquire("k") {
                        peak.fetch_max(
                            limiter.in_flight("k"),
                            std::sync::atomic::Ordering::Relaxed,
                        );
                    }
                }
            });
        }
    });
    assert!(peak.into_inner() <= 2);
    assert_eq!(limiter.in_flight("k"), 0);
}
