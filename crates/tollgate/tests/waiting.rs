//! `reserve` and `until_ready` on a fake clock: exact waits, deadlines kept,
//! and no real sleeping anywhere.

use std::time::Duration;

use tollgate::{Algorithm, Clock, FakeClock, Limit, Limiter, Quota, RetryAfter, WaitError};

const MS: u64 = 1_000_000;

/// 10 per second (T = 100 ms), burst 2.
fn limiter(algorithm: Algorithm) -> (Limiter<String, FakeClock>, FakeClock) {
    let clock = FakeClock::at(1_000 * MS);
    let quota = Quota::per_second(10).unwrap().with_burst(2).unwrap();
    let limiter = Limiter::builder(Limit::new(algorithm, quota))
        .clock(clock.clone())
        .build();
    (limiter, clock)
}

/// Runs `future` while moving `clock` to each sleeper's wake-up time, the
/// way tokio's paused clock auto-advances: time passes only while every
/// task waits on it.
async fn drive<T>(
    clock: &FakeClock,
    step: Duration,
    future: impl std::future::Future<Output = T>,
) -> T {
    let mut future = std::pin::pin!(future);
    loop {
        tokio::select! {
            biased;
            out = &mut future => return out,
            _ = tokio::task::yield_now() => {
                if clock.sleepers() > 0 {
                    clock.advance(step);
                }
            }
        }
    }
}

#[tokio::test]
async fn until_ready_waits_exactly_the_retry_after() {
    let (limiter, clock) = limiter(Algorithm::Gcra);
    assert!(limiter.check_cost("k", 2).allowed);
    let start = clock.now();
    let d = drive(
        &clock,
        Duration::from_millis(1),
        limiter.until_ready("k", 1, Duration::from_secs(1)),
    )
    .await
    .unwrap();
    assert!(d.allowed);
    assert_eq!(clock.now() - start, 100 * MS);
}

#[tokio::test]
async fn until_ready_fails_fast_past_the_deadline_and_charges_nothing() {
    let (limiter, clock) = limiter(Algorithm::TokenBucket);
    assert!(limiter.check_cost("k", 2).allowed);
    let before = limiter.peek("k");
    let err = limiter
        .until_ready("k", 2, Duration::from_millis(199))
        .await
        .unwrap_err();
    assert_eq!(err, WaitError::TooLate { wait: 200 * MS });
    assert_eq!(limiter.peek("k"), before);
    assert_eq!(clock.sleepers(), 0, "never slept");
    // A deadline exactly at the wait is met.
    let ok = drive(
        &clock,
        Duration::from_millis(10),
        limiter.until_ready("k", 2, Duration::from_millis(200)),
    )
    .await;
    assert!(ok.unwrap().allowed);
}

#[tokio::test]
async fn until_ready_refuses_a_cost_that_can_never_fit() {
    let (limiter, _) = limiter(Algorithm::LeakyBucket);
    let err = limiter
        .until_ready("k", 3, Duration::from_secs(3600))
        .await
        .unwrap_err();
    assert!(matches!(err, WaitError::NeverFits(d) if d.retry_after == RetryAfter::Never));
}

#[tokio::test]
async fn until_ready_keeps_waiting_when_another_caller_takes_the_slot() {
    let (limiter, clock) = limiter(Algorithm::Gcra);
    assert!(limiter.check_cost("k", 2).allowed);
    let waiter = limiter.until_ready("k", 1, Duration::from_millis(250));
    let thief = async {
        while clock.sleepers() == 0 {
            tokio::task::yield_now().await;
        }
        clock.advance(Duration::from_millis(100));
        assert!(limiter.check("k").allowed, "the thief takes the slot");
        while clock.sleepers() == 0 {
            tokio::task::yield_now().await;
        }
        clock.advance(Duration::from_millis(100));
    };
    let (got, ()) = tokio::join!(waiter, thief);
    assert!(got.unwrap().allowed);
}

#[test]
fn reserve_charges_the_earliest_slot_and_holds_the_key_until_then() {
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
    ] {
        let (limiter, clock) = limiter(algorithm);
        let exhaust = if algorithm.uses_burst() { 2 } else { 10 };
        assert!(limiter.check_cost("k", exhaust).allowed);
        let wait = match limiter.peek("k").retry_after {
            RetryAfter::Now => limiter.check("k").retry_after.as_nanos().unwrap(),
            other => other.as_nanos().unwrap(),
        };
        let r = limiter.reserve("k", 1, Duration::MAX).unwrap();
        assert_eq!(r.ready_at(), clock.now() + wait, "{algorithm}");
        assert!(r.decision().allowed);
        assert_eq!(r.wait(), Duration::from_nanos(wait));
        // Nothing may go before the reservation.
        let held = limiter.check("k");
        assert!(!held.allowed, "{algorithm}");
        let RetryAfter::After(retry) = held.retry_after else {
            panic!("{held:?}")
        };
        assert!(retry >= wait, "{algorithm}: {retry} vs {wait}");
        clock.advance(Duration::from_nanos(retry - 1));
        assert!(
            !limiter.check("k").allowed,
            "{algorithm}: retry_after is exact"
        );
        clock.advance(Duration::from_nanos(1));
        assert!(
            limiter.check("k").allowed,
            "{algorithm}: retry_after is exact"
        );
    }
}

#[test]
fn reserve_on_the_leaky_queue_is_its_delay() {
    let (limiter, clock) = limiter(Algorithm::LeakyQueue);
    let first = limiter.reserve("k", 1, Duration::MAX).unwrap();
    assert_eq!(first.ready_at(), clock.now());
    let second = limiter.reserve("k", 1, Duration::MAX).unwrap();
    assert_eq!(second.wait(), Duration::from_millis(100));
    assert_eq!(second.decision().delay, 100 * MS);
}

#[test]
fn reserve_refuses_past_max_wait_without_charging() {
    let (limiter, _) = limiter(Algorithm::Gcra);
    assert!(limiter.check_cost("k", 2).allowed);
    let before = limiter.peek("k");
    let err = limiter
        .reserve("k", 1, Duration::from_millis(99))
        .err()
        .unwrap();
    assert_eq!(err, WaitError::TooLate { wait: 100 * MS });
    assert_eq!(limiter.peek("k"), before);
    assert!(matches!(
        limiter.reserve("k", 3, Duration::MAX),
        Err(WaitError::NeverFits(_))
    ));
}

#[test]
fn a_cancelled_reservation_gives_its_cost_back() {
    let (limiter, clock) = limiter(Algorithm::Gcra);
    assert!(limiter.check("k").allowed);
    let r = limiter.reserve("k", 1, Duration::MAX).unwrap();
    assert_eq!(r.wait(), Duration::ZERO, "one left in the burst");
    assert!(!limiter.check("k").allowed);
    r.cancel();
    assert!(limiter.check("k").allowed);
    // A reservation ahead in time, cancelled: its room is usable from its
    // time on.
    let ahead = limiter.reserve("k", 1, Duration::MAX).unwrap();
    let ready_at = ahead.ready_at();
    ahead.cancel();
    clock.set(ready_at);
    assert_eq!(limiter.peek("k").remaining, 1);
}

#[tokio::test]
async fn a_reservation_sleeps_until_ready() {
    let (limiter, clock) = limiter(Algorithm::Gcra);
    assert!(limiter.check_cost("k", 2).allowed);
    let r = limiter.reserve("k", 1, Duration::MAX).unwrap();
    drive(&clock, Duration::from_millis(25), r.ready()).await;
    assert_eq!(clock.now(), r.ready_at());
}

/// A fake clock that declares a reorder window, as the default clock does.
#[derive(Clone)]
struct Reordering(FakeClock, u64);

impl Clock for Reordering {
    fn now(&self) -> u64 {
        self.0.now()
    }

    fn reorder_window(&self) -> u64 {
        self.1
    }
}

#[test]
fn within_the_clock_s_reorder_window_a_reservation_s_time_is_now() {
    const WINDOW: u64 = 10_000;
    // The same key state in three limiters: a check `WINDOW` before the
    // reservation's time is decided as at that time; one nanosecond
    // earlier still, it is refused as before a reservation.
    let build = |window: u64| {
        let clock = FakeClock::at(1_000 * MS);
        let quota = Quota::per_second(10).unwrap().with_burst(2).unwrap();
        let limiter = Limiter::builder(Limit::new(Algorithm::Gcra, quota))
            .clock(Reordering(clock.clone(), window))
            .build();
        assert!(limiter.check_cost("k", 2).allowed);
        let ready_at = limiter.reserve("k", 1, Duration::MAX).unwrap().ready_at();
        (limiter, clock, ready_at)
    };
    let (exact, exact_clock, ready_at) = build(0);
    let (inside, inside_clock, _) = build(WINDOW);
    let (outside, outside_clock, _) = build(WINDOW);
    exact_clock.set(ready_at);
    inside_clock.set(ready_at - WINDOW);
    outside_clock.set(ready_at - WINDOW - 1);
    let at_ready = exact.check("k");
    assert_eq!(inside.check("k"), at_ready);
    let before = outside.check("k");
    assert!(!before.allowed, "{before:?}");
    assert_eq!(
        before.retry_after.as_nanos().unwrap(),
        WINDOW + 1 + at_ready.retry_after.as_nanos().unwrap_or(0),
        "{before:?} vs {at_ready:?}"
    );
}
