//! The race a read-then-write limiter loses, next to the atomic one.
//!
//! Both enforce "100 per hour" on one key, with the same 50 concurrent
//! clients sending 10 requests each. The naive fixed window reads the
//! counter, decides in the client and then increments it: two clients can
//! read the same count and both go through. tollgate's fixed window decides
//! and charges in one Redis Function call.
//!
//! `cargo run -p tollgate-redis --example redis_race [-- redis://HOST:PORT]`
//! (without a URL it starts its own `redis-server` on a free port).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::AsyncCommands;
use tollgate::{Algorithm, Limit, Policy, Quota};
use tollgate_redis::harness::RedisServer;
use tollgate_redis::RedisConfig;
use tollgate_testkit::race::{admitted, charge_one, report};

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
        let conn = client.get_multiplexed_async_connection().await?;
        let key = naive_key.clone();
        naive.push(move || {
            let (mut conn, key) = (conn.clone(), key.clone());
            async move { naive_check(&mut conn, &key).await }
        });
    }
    let naive_admitted = admitted(naive, REQUESTS).await?;

    let policy = Policy::new(Limit::new(Algorithm::FixedWindow, Quota::per_hour(LIMIT)?));
    let atomic_key = format!("race:{run}");
    let mut atomic = Vec::new();
    for _ in 0..CLIENTS {
        // This shows the race, not the latency: a busy machine may take
        // longer than the default deadline.
        let backend = RedisConfig::new(&url)
            .timeout(Duration::from_secs(2))
            .connect()
            .await?;
        atomic.push(charge_one(backend, &atomic_key, &policy)?);
    }
    let atomic_admitted = admitted(atomic, REQUESTS).await?;

    println!(
        "{}",
        report(LIMIT, CLIENTS, REQUESTS, naive_admitted, atomic_admitted)
    );
    Ok(())
}
