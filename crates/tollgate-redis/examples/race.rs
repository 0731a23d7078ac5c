//! The race a read-then-write limiter loses, next to the atomic one.
//!
//! Both enforce "100 per hour" on one key, with the same 50 concurrent
//! clients sending 10 requests each. The naive fixed window reads the
//! counter, decides in the client and then increments it: two clients can
//! read the same count and both go through. tollgate's fixed window decides
//! and charges in one Redis Function call.
//!
//! `cargo run -p tollgate-redis --example race [-- redis://HOST:PORT]`
//! (without a URL it starts its own `redis-server` on a free port).

use std::time::{SystemTime, UNIX_EPOCH};

use redis::AsyncCommands;
use tollgate::{Algorithm, Backend, Limit, Policy, Quota};
use tollgate_redis::harness::RedisServer;
use tollgate_redis::RedisBackend;

const CLIENTS: usize = 50;
const REQUESTS: usize = 10;
const LIMIT: u64 = 100;

/// The naive limiter: GET, compare, INCR. Three round trips, no atomicity.
async fn naive_check(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
) -> redis::RedisResult<bool> {
    let count: Option<u64> = conn.get(key).await?;
    if count.unwrap_or(0) + 1 > LIMIT {
        return Ok(false);
    }
    let _: u64 = conn.incr(key, 1).await?;
    let _: bool = conn.expire(key, 3600).await?;
    Ok(true)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let own_server;
    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => {
            own_server = RedisServer::start()?;
            own_server.url()
        }
    };
    let client = redis::Client::open(url.as_str())?;
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    let naive_key = format!("race:naive:{run}");

    let mut naive = Vec::new();
    for _ in 0..CLIENTS {
        let mut conn = client.get_multiplexed_async_connection().await?;
        let key = naive_key.clone();
        naive.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..REQUESTS {
                admitted += naive_check(&mut conn, &key).await? as u64;
            }
            Ok::<_, redis::RedisError>(admitted)
        }));
    }
    let mut naive_admitted = 0;
    for task in naive {
        naive_admitted += task.await??;
    }

    let policy = Policy::new(Limit::new(Algorithm::FixedWindow, Quota::per_hour(LIMIT)?));
    let atomic_key = format!("race:{run}");
    let mut atomic = Vec::new();
    for _ in 0..CLIENTS {
        let backend = RedisBackend::connect(&url).await?;
        let (policy, key) = (policy.clone(), atomic_key.clone());
        atomic.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..REQUESTS {
                admitted += backend.check(&key, &policy, 1).await?.allowed as u64;
            }
            Ok::<_, tollgate::BackendError>(admitted)
        }));
    }
    let mut atomic_admitted = 0;
    for task in atomic {
        atomic_admitted += task.await??;
    }

    let total = CLIENTS * REQUESTS;
    println!(
        "limit {LIMIT} per hour, {CLIENTS} concurrent clients x {REQUESTS} requests = {total}"
    );
    println!("naive read-then-write fixed window: {naive_admitted} let through");
    println!("tollgate atomic fixed window:       {atomic_admitted} let through");
    Ok(())
}
