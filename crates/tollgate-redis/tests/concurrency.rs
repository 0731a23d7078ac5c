//! Atomicity under concurrency: 20 clients, each on its own connection,
//! send 25 requests each at a key allowing 100; exactly 100 get through,
//! for every algorithm, 20 times over. And 64 callers sharing one backend
//! share one multiplexed connection, which comes back by itself after the
//! server restarts.

mod common;

use std::time::{Duration, Instant};

use tollgate::{Algorithm, Backend, BackendError, BackendExt, Policy};
use tollgate_redis::RedisBackend;
use tollgate_testkit::race::{admitted, charge_one, hourly};

const CLIENTS: usize = 20;
const REQUESTS: usize = 25;
const ROUNDS: usize = 20;
const LIMIT: u64 = 100;

fn policy(algorithm: Algorithm) -> Policy {
    hourly(algorithm, LIMIT)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_admit_exactly_the_limit() {
    let Some(server) = common::server() else {
        return;
    };
    let prefix = common::fresh_prefix();
    let mut clients: Vec<RedisBackend> = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        let client = common::config(&server.url()).prefix(prefix.clone());
        clients.push(client.connect().await.unwrap());
    }
    for algorithm in Algorithm::ALL {
        let policy = policy(algorithm);
        for round in 0..ROUNDS {
            let key = format!("{algorithm}-{round}");
            let checks = clients
                .iter()
                .map(|client| charge_one(client.clone(), &key, &policy).unwrap())
                .collect();
            let admitted = admitted(checks, REQUESTS).await.unwrap();
            assert_eq!(admitted, LIMIT, "{algorithm}, round {round}");
        }
    }
}

/// Sends `per_caller` requests from each of `callers` tasks sharing
/// `redis`; a caller that meets the restart's dropped connection (a typed
/// `Unavailable` or `Timeout`, never a hang) tries again. Returns how many
/// were admitted.
async fn shared_callers(redis: &RedisBackend, key: &str, callers: usize, per_caller: usize) -> u64 {
    let policy = policy(Algorithm::Gcra);
    let policy = redis.prepare(&policy).unwrap();
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (redis, policy, key) = (redis.clone(), policy.clone(), key.to_string());
            tokio::spawn(async move {
                let start = Instant::now();
                let mut admitted = 0;
                for _ in 0..per_caller {
                    let decision = loop {
                        match redis.check(&key, &policy, 1).await {
                            Ok(d) => break d,
                            Err(BackendError::Unavailable(_) | BackendError::Timeout(_)) => {
                                assert!(start.elapsed() < Duration::from_secs(20), "no recovery");
                                tokio::time::sleep(Duration::from_millis(10)).await;
                            }
                            Err(e) => panic!("unexpected error: {e}"),
                        }
                    };
                    admitted += decision.allowed as u64;
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    admitted
}

/// Clients connected to `server`, redis-cli's own connection included.
fn connected_clients(server: &tollgate_redis::harness::RedisServer) -> usize {
    let info = server.cli(&["info", "clients"]).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("connected_clients in INFO")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_callers_share_one_connection_across_a_restart() {
    let Some(mut server) = common::server() else {
        return;
    };
    let redis = common::backend(&server.url()).await;
    assert_eq!(shared_callers(&redis, "before", 64, 4).await, LIMIT);
    // The backend's one multiplexed connection, and redis-cli asking.
    assert_eq!(connected_clients(&server), 2);

    // The server dies with the callers' next requests in flight: each call
    // fails typed or succeeds once the connection and the library are back.
    let again = shared_callers(&redis, "during", 64, 4);
    let restart = tokio::task::spawn_blocking(move || {
        server.restart().unwrap();
        server
    });
    let (during, server) = tokio::join!(again, restart);
    let server = server.unwrap();
    assert!(during <= 2 * LIMIT, "{during} admitted across the restart");
    assert_eq!(shared_callers(&redis, "after", 64, 4).await, LIMIT);
    assert_eq!(connected_clients(&server), 2);
}
