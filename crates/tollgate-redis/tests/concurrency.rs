//! Atomicity under concurrency: 20 clients, each on its own connection,
//! send 25 requests each at a key allowing 100; exactly 100 get through,
//! for every algorithm, 50 times over.

mod common;

use tollgate::{Algorithm, Backend, Limit, Policy, Quota};
use tollgate_redis::RedisBackend;

const CLIENTS: usize = 20;
const REQUESTS: usize = 25;
const ROUNDS: usize = 50;
const LIMIT: u64 = 100;

/// 100 per hour: nothing refills or rolls over during a round, so the only
/// way to admit more or less than 100 is a race.
fn policy(algorithm: Algorithm) -> Policy {
    let hour = 3_600_000_000_000;
    // The queue serves one at once and holds `burst` more.
    let burst = if algorithm == Algorithm::LeakyQueue {
        LIMIT - 1
    } else {
        LIMIT
    };
    Policy::new(Limit::new(
        algorithm,
        Quota::with_parts(LIMIT, hour, burst).unwrap(),
    ))
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
            let tasks: Vec<_> = clients
                .iter()
                .map(|client| {
                    let (client, policy, key) = (client.clone(), policy.clone(), key.clone());
                    tokio::spawn(async move {
                        let mut admitted = 0;
                        for _ in 0..REQUESTS {
                            admitted +=
                                client.check(&key, &policy, 1).await.unwrap().allowed as u64;
                        }
                        admitted
                    })
                })
                .collect();
            let mut admitted = 0;
            for task in tasks {
                admitted += task.await.unwrap();
            }
            assert_eq!(admitted, LIMIT, "{algorithm}, round {round}");
        }
    }
}
