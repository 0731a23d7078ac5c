//! What the store does besides deciding: keys and TTLs, the sliding log's
//! per-request members, layered limits, validation, reloads after a lost
//! library or a restart, and a timeout within the deadline (the other
//! error kinds are in `errors.rs`).

mod common;

use std::time::{Duration, Instant};

use tollgate::{Algorithm, Backend, BackendError, BackendExt, Limit, Policy, Quota, RetryAfter};
use tollgate_redis::RedisBackend;

const MINUTE: u64 = 60_000_000_000;
const T0_US: u64 = 1_700_000_000_000_000;

fn policy(algorithm: Algorithm, limit: u64, period: u64) -> Policy {
    Policy::new(Limit::new(algorithm, Quota::new(limit, period).unwrap()))
}

#[tokio::test]
async fn two_requests_in_the_same_microsecond_both_count_in_the_log() {
    let Some(server) = common::server() else {
        return;
    };
    let redis = common::backend(&server.url()).await;
    let log = policy(Algorithm::SlidingLog, 3, MINUTE);
    for expected_remaining in [2, 1] {
        let d = redis.check_at("k", &log, 1, T0_US).await.unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, expected_remaining);
    }
    let d = redis.check_at("k", &log, 2, T0_US).await.unwrap();
    assert!(!d.allowed, "2 + 2 > 3 in the same microsecond");
    let keys = redis.redis_keys("k", &log).unwrap();
    assert_eq!(server.cli(&["zcard", &keys[0]]).unwrap().trim(), "2");
    // Both leave together one period later.
    let d = redis
        .check_at("k", &log, 3, T0_US + MINUTE / 1000)
        .await
        .unwrap();
    assert!(d.allowed);
}

#[tokio::test]
async fn every_charged_key_gets_its_reset_after_as_ttl() {
    let Some(server) = common::server() else {
        return;
    };
    let redis = common::backend(&server.url()).await;
    for algorithm in Algorithm::ALL {
        let policy = policy(algorithm, 10, MINUTE);
        let policy = redis.prepare(&policy).unwrap();
        let d = redis.check("ttl", &policy, 3).await.unwrap();
        assert!(d.allowed && d.reset_after > 0, "{algorithm}");
        // A refund writes too (the log's third key holds its time).
        redis.refund("ttl", &policy, 1).await.unwrap();
        let reset_ms = d.reset_after.div_ceil(1_000_000);
        for key in redis.redis_keys("ttl", policy.policy()).unwrap() {
            let ttl: i64 = server.cli(&["pttl", &key]).unwrap().trim().parse().unwrap();
            assert!(
                ttl > 0 && ttl as u64 <= reset_ms,
                "{algorithm} {key}: {ttl} ms vs {reset_ms}"
            );
        }
        // A denial or a peek changes nothing, TTL included.
        redis.check("ttl", &policy, 0).await.unwrap();
    }
}

#[tokio::test]
async fn layered_limits_charge_all_or_none() {
    let Some(server) = common::server() else {
        return;
    };
    let redis = common::backend(&server.url()).await;
    let window = Limit::new(Algorithm::FixedWindow, Quota::new(2, MINUTE).unwrap());
    let bucket = Limit::new(Algorithm::TokenBucket, Quota::new(5, MINUTE).unwrap());
    let both = Policy::with_limits(vec![window, bucket]).unwrap();
    for _ in 0..2 {
        assert!(redis.check_at("u", &both, 1, T0_US).await.unwrap().allowed);
    }
    let denied = redis.check_at("u", &both, 1, T0_US).await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(
        (denied.limit, denied.remaining),
        (2, 0),
        "the tighter limit reports"
    );
    // The bucket alone still has 3 tokens: the denial charged nothing.
    let alone = redis
        .check_at("u", &Policy::new(bucket), 0, T0_US)
        .await
        .unwrap();
    assert_eq!(alone.remaining, 3);
}

#[tokio::test]
async fn bad_policies_and_keys_are_refused_before_reaching_redis() {
    let Some(server) = common::server() else {
        return;
    };
    let redis = common::backend(&server.url()).await;
    // A prime period near a day in ns puts window positions above 2^53.
    let odd = policy(Algorithm::FixedWindow, 10, 86_399_999_999_971);
    assert!(matches!(
        RedisBackend::validate(&odd),
        Err(BackendError::UnsupportedPolicy(_))
    ));
    assert!(matches!(
        redis.prepare(&odd),
        Err(BackendError::UnsupportedPolicy(_))
    ));
    assert!(matches!(
        tollgate::Store::new(odd.clone(), &redis),
        Err(BackendError::UnsupportedPolicy(_))
    ));
    let fine = policy(Algorithm::Gcra, 10, MINUTE);
    let fine = redis.prepare(&fine).unwrap();
    assert!(RedisBackend::validate(fine.policy()).is_ok());
    assert!(matches!(
        redis.check("", &fine, 1).await,
        Err(BackendError::InvalidKey(_))
    ));
    let huge = "k".repeat(10_000);
    assert!(
        redis
            .check_at(&huge, fine.policy(), 1, T0_US)
            .await
            .unwrap()
            .allowed
    );
    assert_eq!(
        redis
            .check_at(&huge, fine.policy(), 10, T0_US)
            .await
            .unwrap()
            .retry_after,
        RetryAfter::After(6_000_000_000),
        "the hashed key kept its state: one more token after 6 s"
    );
}

#[tokio::test]
async fn reset_forgets_the_key() {
    let Some(server) = common::server() else {
        return;
    };
    let redis = common::backend(&server.url()).await;
    let p = policy(Algorithm::SlidingLog, 1, MINUTE);
    let p = redis.prepare(&p).unwrap();
    assert!(redis.check("r", &p, 1).await.unwrap().allowed);
    assert!(!redis.check("r", &p, 1).await.unwrap().allowed);
    redis.reset("r", &p).await.unwrap();
    assert!(redis.check("r", &p, 1).await.unwrap().allowed);
}

#[tokio::test]
async fn a_lost_library_is_reloaded_without_an_error() {
    let Some(server) = common::server() else {
        return;
    };
    for mode in [
        tollgate_redis::ScriptMode::Functions,
        tollgate_redis::ScriptMode::Eval,
    ] {
        let redis = common::config(&server.url())
            .mode(mode)
            .connect()
            .await
            .unwrap();
        let p = policy(Algorithm::Gcra, 5, MINUTE);
        let p = redis.prepare(&p).unwrap();
        assert!(redis.check("f", &p, 1).await.unwrap().allowed);
        server.cli(&["function", "flush"]).unwrap();
        server.cli(&["script", "flush"]).unwrap();
        let d = redis.check("f", &p, 1).await.unwrap();
        assert_eq!(d.remaining, 3, "{mode:?}: state kept, library reloaded");
    }
}

#[tokio::test]
async fn a_restarted_server_is_reconnected_and_reloaded() {
    let Some(mut server) = common::server() else {
        return;
    };
    let redis = common::backend(&server.url()).await;
    let p = policy(Algorithm::FixedWindow, 100, MINUTE);
    let p = redis.prepare(&p).unwrap();
    for _ in 0..10 {
        assert!(redis.check("r", &p, 1).await.unwrap().allowed);
    }
    server.restart().unwrap();
    // The first calls may see the dropped connection; none may hang.
    let start = Instant::now();
    let decision = loop {
        match redis.check("r", &p, 1).await {
            Ok(d) => break d,
            Err(BackendError::Unavailable(_) | BackendError::Timeout(_)) => {
                assert!(start.elapsed() < Duration::from_secs(10), "no recovery");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("unexpected error after restart: {e}"),
        }
    };
    assert!(decision.allowed);
    assert_eq!(decision.remaining, 99, "a fresh server starts from scratch");
}

#[tokio::test]
async fn a_paused_server_times_out_within_the_deadline() {
    let Some(server) = common::server() else {
        return;
    };
    let deadline = Duration::from_millis(50);
    let redis = common::config(&server.url())
        .timeout(deadline)
        .connect()
        .await
        .unwrap();
    let p = policy(Algorithm::Gcra, 5, MINUTE);
    let p = redis.prepare(&p).unwrap();
    assert!(redis.check("t", &p, 1).await.is_ok());
    let port = server.port().to_string();
    let sleeper = std::thread::spawn(move || {
        std::process::Command::new("redis-cli")
            .args(["-p", &port, "debug", "sleep", "2"])
            .output()
    });
    // Until the server is asleep, calls still succeed; the first one made
    // while it sleeps must come back as a timeout, within the deadline.
    let begin = Instant::now();
    loop {
        assert!(
            begin.elapsed() < Duration::from_secs(2),
            "the server never paused"
        );
        let start = Instant::now();
        match redis.check("t", &p, 1).await {
            Ok(_) => std::thread::sleep(Duration::from_millis(5)),
            Err(BackendError::Timeout(d)) => {
                assert_eq!(d, deadline);
                // Generous for a busy machine, far below the 2 s pause.
                let elapsed = start.elapsed();
                assert!(elapsed < Duration::from_millis(500), "took {elapsed:?}");
                break;
            }
            Err(e) => panic!("expected a timeout, got {e}"),
        }
    }
    sleeper.join().unwrap().unwrap();
    assert!(
        redis.check("t", &p, 1).await.is_ok(),
        "usable again after the pause"
    );
}

#[tokio::test]
async fn the_store_switches_from_memory_to_redis_in_one_line() {
    let Some(server) = common::server() else {
        return;
    };
    let policy = policy(Algorithm::TokenBucket, 3, MINUTE);
    let memory = tollgate::Store::new(policy.clone(), tollgate::MemoryBackend::new()).unwrap();
    let redis = tollgate::Store::new(policy, common::backend(&server.url()).await).unwrap();
    for cost in [1, 1, 2, 1, 4] {
        let (a, b) = (
            memory.check_cost("k", cost).await.unwrap(),
            redis.check_cost("k", cost).await.unwrap(),
        );
        // Decided microseconds apart on two clocks: the same verdicts.
        assert_eq!((a.allowed, a.limit), (b.allowed, b.limit), "cost {cost}");
    }
    redis.reset("k").await.unwrap();
    assert_eq!(redis.peek("k").await.unwrap().remaining, 3);
}

#[tokio::test]
async fn refund_force_and_lease_on_the_server_clock() {
    let Some(server) = common::server() else {
        return;
    };
    let store = tollgate::Store::new(
        policy(Algorithm::Gcra, 10, MINUTE),
        common::backend(&server.url()).await,
    )
    .unwrap();
    let lease = store.lease("k", 4).await.unwrap();
    assert_eq!((lease.granted, lease.decision.remaining), (4, 6));
    // Three of the four went unused.
    assert_eq!(store.refund("k", 3).await.unwrap().remaining, 9);
    let forced = store.force("k", 25).await.unwrap();
    assert!(forced.allowed);
    assert_eq!(forced.remaining, 0);
    // 16 units of debt beyond the burst and one more for the request, 6 s
    // each, less the few microseconds since the charge.
    let denied = store.check("k").await.unwrap();
    let RetryAfter::After(wait) = denied.retry_after else {
        panic!("{denied:?}")
    };
    assert!(
        wait <= 17 * 6_000_000_000 && wait > 16 * 6_000_000_000,
        "{wait}"
    );
    let empty = store.lease("k", 4).await.unwrap();
    assert_eq!(empty.granted, 0);
    assert!(!empty.decision.allowed);
    let log = tollgate::Store::new(
        policy(Algorithm::SlidingLog, 10, MINUTE),
        common::backend(&server.url()).await,
    )
    .unwrap();
    let refused = log.lease("k", 1).await.unwrap_err();
    assert!(
        matches!(&refused, BackendError::UnsupportedPolicy(m) if m.contains("sliding_log")),
        "{refused}"
    );
}

#[tokio::test]
async fn a_forced_charge_beyond_the_exact_range_is_refused_and_changes_nothing() {
    let Some(server) = common::server() else {
        return;
    };
    let redis = common::backend(&server.url()).await;
    for algorithm in Algorithm::ALL {
        let policy = policy(algorithm, 10, MINUTE);
        let max = tollgate_redis::exact::encode(&policy.limits()[0])
            .unwrap()
            .max;
        let before = redis.check_at("big", &policy, 3, T0_US).await.unwrap();
        for cost in [max, u64::MAX] {
            let err = redis
                .apply_at(
                    "big",
                    &policy,
                    tollgate_redis::Operation::Force(cost),
                    T0_US,
                )
                .await
                .unwrap_err();
            assert!(
                matches!(&err, BackendError::OutOfRange(m) if m.contains("exact")),
                "{algorithm}: {err}"
            );
        }
        let after = redis.check_at("big", &policy, 0, T0_US).await.unwrap();
        assert_eq!(after.remaining, before.remaining, "{algorithm}");
    }
}

#[tokio::test]
async fn a_full_server_still_serves_peeks_on_new_connections() {
    let Some(server) = common::server() else {
        return;
    };
    let p = policy(Algorithm::Gcra, 5, MINUTE);
    let config = common::config(&server.url());
    let redis = config.clone().connect().await.unwrap();
    assert!(
        redis
            .check("full", &redis.prepare(&p).unwrap(), 2)
            .await
            .unwrap()
            .allowed
    );
    // Full: nothing may be written any more.
    server
        .cli(&["config", "set", "maxmemory-policy", "noeviction"])
        .unwrap();
    server.cli(&["config", "set", "maxmemory", "1"]).unwrap();
    // A new connection (as each `tollgate check` makes) loads nothing, and
    // a peek writes nothing.
    let fresh = config.connect().await.unwrap();
    let peek = fresh
        .check("full", &fresh.prepare(&p).unwrap(), 0)
        .await
        .unwrap();
    assert_eq!(peek.remaining, 3);
    // A charge cannot be stored: a typed store error, not a wrong answer.
    let charge = fresh.check("full", &fresh.prepare(&p).unwrap(), 1).await;
    assert!(
        matches!(&charge, Err(BackendError::Store(m)) if m.contains("OOM")),
        "{charge:?}"
    );
    server.cli(&["config", "set", "maxmemory", "0"]).unwrap();
    assert!(
        fresh
            .check("full", &fresh.prepare(&p).unwrap(), 1)
            .await
            .unwrap()
            .allowed
    );
}

/// Two preparations of one policy decide on the same state, and a policy
/// outside the exact range is refused when prepared.
#[tokio::test]
async fn a_policy_prepared_twice_shares_the_key() {
    let Some(server) = common::server() else {
        return;
    };
    let redis = common::backend(&server.url()).await;
    for algorithm in Algorithm::ALL {
        let p = policy(algorithm, 4, MINUTE);
        let once = redis.prepare(&p).unwrap();
        let again = redis.prepare(&p).unwrap();
        let a = redis.check("e", &once, 1).await.unwrap();
        let b = redis.check("e", &again, 1).await.unwrap();
        let c = redis.check("e", &once, 1).await.unwrap();
        assert!(a.allowed && b.allowed && c.allowed, "{algorithm}");
        // Each call takes one unit from the same count.
        let first = a.remaining;
        assert!(first >= 3, "{algorithm}");
        assert_eq!(
            (b.remaining, c.remaining),
            (first - 1, first - 2),
            "{algorithm}"
        );
    }
    let odd = policy(Algorithm::FixedWindow, 10, 86_399_999_999_971);
    assert!(matches!(
        redis.prepare(&odd),
        Err(BackendError::UnsupportedPolicy(_))
    ));
}
