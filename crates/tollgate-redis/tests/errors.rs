//! Each failure has its own kind: a refused or reset connection is
//! `Unavailable`, refused credentials are `Unauthorized`, and `Timeout`
//! means the store was reached and did not answer in time. Real servers
//! (and a silent listener) on free local ports.

mod common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Backend, BackendError, BackendExt, Limit, Policy, Quota};
use tollgate_redis::harness::{skip_requested, RedisServer};
use tollgate_redis::RedisConfig;

fn policy() -> Policy {
    Policy::new(Limit::new(Algorithm::Gcra, Quota::per_second(5).unwrap()))
}

/// A port on 127.0.0.1 where nothing listens.
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn config(url: &str) -> RedisConfig {
    RedisConfig::new(url)
        .timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_secs(2))
}

#[tokio::test]
async fn a_closed_port_is_unavailable_not_a_timeout() {
    if skip_requested() {
        return;
    }
    let start = Instant::now();
    let url = format!("redis://127.0.0.1:{}", closed_port());
    let result = config(&url).connect().await;
    assert!(
        matches!(&result, Err(BackendError::Unavailable(_))),
        "{:?}",
        result.err()
    );
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "not before the deadline"
    );
}

#[tokio::test]
async fn wrong_or_missing_credentials_are_unauthorized() {
    let Some(server) = (!skip_requested())
        .then(|| RedisServer::start_with_password("s3cr3t").unwrap_or_else(|e| panic!("{e}")))
    else {
        return;
    };
    let port = server.port();
    for url in [
        format!("redis://:wrong-pw@127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}"),
    ] {
        let result = config(&url).connect().await;
        let Err(BackendError::Unauthorized(why)) = &result else {
            panic!("{url}: {:?}", result.err());
        };
        assert!(!why.contains("wrong-pw"), "{why}");
    }
    let redis = config(&format!("redis://:s3cr3t@127.0.0.1:{port}"))
        .connect()
        .await
        .unwrap();
    assert!(
        redis
            .check("k", &redis.prepare(&policy()).unwrap(), 1)
            .await
            .unwrap()
            .allowed
    );
}

#[tokio::test]
async fn a_dead_server_is_unavailable_on_every_call() {
    let Some(mut server) = common::server() else {
        return;
    };
    let redis = config(&server.url()).connect().await.unwrap();
    assert!(redis
        .check("k", &redis.prepare(&policy()).unwrap(), 1)
        .await
        .is_ok());
    server.kill();
    for call in 0..5 {
        let result = redis
            .check("k", &redis.prepare(&policy()).unwrap(), 1)
            .await;
        assert!(
            matches!(&result, Err(BackendError::Unavailable(_))),
            "call {call}: {result:?}"
        );
    }
    // Back on the same port: served again.
    server.restart().unwrap();
    let start = Instant::now();
    while redis
        .check("k", &redis.prepare(&policy()).unwrap(), 1)
        .await
        .is_err()
    {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "never reconnected"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_store_that_never_answers_is_a_timeout() {
    if skip_requested() {
        return;
    }
    // Accepts connections and never says a word.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = std::thread::spawn(move || {
        let mut sockets = vec![];
        for socket in listener.incoming().take(8) {
            sockets.push(socket);
        }
        sockets
    });
    let deadline = Duration::from_millis(300);
    let result = RedisConfig::new(format!("redis://127.0.0.1:{port}"))
        .connect_timeout(deadline)
        .connect()
        .await;
    assert!(
        matches!(&result, Err(BackendError::Timeout(d)) if *d == deadline),
        "{:?}",
        result.err()
    );
    drop(held);
}

#[tokio::test]
async fn a_paused_server_is_a_timeout_and_then_answers_again() {
    let Some(server) = common::server() else {
        return;
    };
    let deadline = Duration::from_millis(100);
    let redis = config(&server.url())
        .timeout(deadline)
        .connect()
        .await
        .unwrap();
    assert!(redis
        .check("k", &redis.prepare(&policy()).unwrap(), 1)
        .await
        .is_ok());
    server.pause().unwrap();
    let result = redis
        .check("k", &redis.prepare(&policy()).unwrap(), 1)
        .await;
    server.resume().unwrap();
    assert!(
        matches!(&result, Err(BackendError::Timeout(d)) if *d == deadline),
        "{result:?}"
    );
    let start = Instant::now();
    while redis
        .check("k", &redis.prepare(&policy()).unwrap(), 1)
        .await
        .is_err()
    {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "never answered again"
        );
    }
}

#[test]
fn a_config_shows_its_url_without_credentials() {
    let config = RedisConfig::new("redis://admin:s3cr3t@10.0.0.5:6379/1");
    let shown = format!("{config:?}");
    assert!(
        !shown.contains("s3cr3t") && !shown.contains("admin"),
        "{shown}"
    );
    assert!(shown.contains("redis://***@10.0.0.5:6379/1"), "{shown}");
}

/// A call carries its deadline on the server's clock: three calls time out
/// while the server is paused, reach it when it resumes, and charge nothing
/// (before the deadline was carried, all three were charged then).
#[tokio::test]
async fn a_call_run_past_its_deadline_charges_nothing() {
    let Some(server) = common::server() else {
        return;
    };
    let redis = config(&server.url())
        .timeout(Duration::from_millis(100))
        .connect()
        .await
        .unwrap();
    let p = Policy::new(Limit::new(
        Algorithm::FixedWindow,
        Quota::per_hour(10).unwrap(),
    ));
    let p = redis.prepare(&p).unwrap();
    assert_eq!(redis.check("k", &p, 1).await.unwrap().remaining, 9);
    server.pause().unwrap();
    for _ in 0..3 {
        let result = redis.check("k", &p, 1).await;
        assert!(
            matches!(result, Err(BackendError::Timeout(_))),
            "{result:?}"
        );
    }
    server.resume().unwrap();
    // The same connection answers in order: the peek comes after the three.
    let start = Instant::now();
    let peek = loop {
        match redis.check("k", &p, 0).await {
            Ok(d) => break d,
            Err(e) => assert!(start.elapsed() < Duration::from_secs(5), "{e}"),
        }
    };
    assert_eq!(
        peek.remaining, 9,
        "the three timed-out calls charged nothing"
    );
}
