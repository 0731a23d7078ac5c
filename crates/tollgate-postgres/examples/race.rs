//! The race a read-then-write limiter loses, next to the atomic one.
//!
//! Both enforce "100 per hour" on one key, with the same 20 concurrent
//! clients (one connection each) sending 25 requests each. The naive fixed
//! window ([`tollgate_postgres::naive`]) selects the count, decides in the
//! client and writes the new count back: clients that read the same count
//! all go through. tollgate's fixed window decides and charges in one
//! statement under the row lock.
//!
//! `cargo run -p tollgate-postgres --example race [-- postgres://USER@HOST/DB]`
//! (without a URL it starts its own PostgreSQL on a free port).

use std::time::{SystemTime, UNIX_EPOCH};

use tollgate::{Algorithm, Backend, Limit, Policy, Quota};
use tollgate_postgres::harness::PgServer;
use tollgate_postgres::naive::NaiveWindow;
use tollgate_postgres::PostgresConfig;

const CLIENTS: usize = 20;
const REQUESTS: usize = 25;
const LIMIT: u64 = 100;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let own_server;
    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => {
            own_server = PgServer::start()?;
            own_server.url()
        }
    };
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    let key = format!("race:{run}");

    let mut naive = Vec::new();
    for _ in 0..CLIENTS {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
        tokio::spawn(conn);
        let window = NaiveWindow::create(&client, "tollgate_naive_race", LIMIT as i64).await?;
        let key = key.clone();
        naive.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..REQUESTS {
                admitted += window.check(&client, &key).await? as u64;
            }
            Ok::<_, tokio_postgres::Error>(admitted)
        }));
    }
    let mut naive_admitted = 0;
    for task in naive {
        naive_admitted += task.await??;
    }

    let policy = Policy::new(Limit::new(Algorithm::FixedWindow, Quota::per_hour(LIMIT)?));
    let mut atomic = Vec::new();
    for _ in 0..CLIENTS {
        let backend = PostgresConfig::new(&url).pool_size(1).connect().await?;
        let (policy, key) = (policy.clone(), key.clone());
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
