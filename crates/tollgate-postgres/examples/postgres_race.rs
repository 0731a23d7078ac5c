//! The race a read-then-write limiter loses, next to the atomic one.
//!
//! Both enforce "100 per hour" on one key, with the same 20 concurrent
//! clients (one connection each) sending 25 requests each. The naive fixed
//! window ([`tollgate_postgres::naive`]) selects the count, decides in the
//! client and writes the new count back: clients that read the same count
//! all go through. tollgate's fixed window decides and charges in one
//! statement under the row lock.
//!
//! `cargo run -p tollgate-postgres --example postgres_race [-- postgres://USER@HOST/DB]`
//! (without a URL it starts its own PostgreSQL on a free port).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tollgate::{Algorithm, Limit, Policy, Quota};
use tollgate_postgres::harness::PgServer;
use tollgate_postgres::naive::NaiveWindow;
use tollgate_postgres::PostgresConfig;
use tollgate_testkit::race::{admitted, charge_one, report};

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
        let shared = Arc::new((window, client, key.clone()));
        naive.push(move || {
            let shared = Arc::clone(&shared);
            async move {
                let (window, client, key) = &*shared;
                window.check(client, key).await
            }
        });
    }
    let naive_admitted = admitted(naive, REQUESTS).await?;

    let policy = Policy::new(Limit::new(Algorithm::FixedWindow, Quota::per_hour(LIMIT)?));
    let mut atomic = Vec::new();
    for _ in 0..CLIENTS {
        // This shows the race, not the latency: a busy machine may take
        // longer than the default deadline.
        let backend = PostgresConfig::new(&url)
            .pool_size(1)
            .timeout(Duration::from_secs(2))
            .connect()
            .await?;
        atomic.push(charge_one(backend, &key, &policy)?);
    }
    let atomic_admitted = admitted(atomic, REQUESTS).await?;

    println!(
        "{}",
        report(LIMIT, CLIENTS, REQUESTS, naive_admitted, atomic_admitted)
    );
    Ok(())
}
