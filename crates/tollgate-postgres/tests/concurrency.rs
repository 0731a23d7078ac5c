//! Several limits on one key stay atomic under concurrency: 20 clients
//! with their own connections send requests of cost 1 and 2 at one instant
//! against a sliding log, GCRA and a fixed window; every limit ends up
//! charged with exactly the admitted total, and the tightest caps it.

mod common;

use tokio_postgres::NoTls;
use tollgate::{Algorithm, Limit, Policy, Quota};
use tollgate_core::RetryAfter;

const CLIENTS: usize = 20;
const REQUESTS: usize = 25;
const MINUTE: u64 = 60_000_000_000;
const T0: u64 = 1_700_000_000_000_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layered_limits_stay_atomic_under_concurrency() {
    let Some(server) = common::shared() else {
        return;
    };
    let prefix = common::fresh_prefix();
    let gcra = Quota::with_parts(10, MINUTE, 80).unwrap();
    let policy = Policy::with_limits(vec![
        Limit::new(Algorithm::SlidingLog, Quota::new(70, MINUTE).unwrap()),
        Limit::new(Algorithm::Gcra, gcra),
        Limit::new(Algorithm::FixedWindow, Quota::new(50, MINUTE).unwrap()),
    ])
    .unwrap();
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let pg = common::config(&server.url())
            .prefix(&prefix)
            .pool_size(1)
            .connect()
            .await
            .unwrap();
        let policy = policy.clone();
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for i in 0..REQUESTS {
                let cost = 1 + ((client + i) % 2) as u64;
                let d = pg.check_at("k", &policy, cost, T0).await.unwrap();
                admitted += if d.allowed { cost } else { 0 };
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    assert!((49..=50).contains(&admitted), "{admitted}");
    // Every limit was charged the admitted total, no more: the row holds
    // the log [n, at, running total], GCRA's [tat, last] and the window's
    // [count, last].
    let (client, conn) = tokio_postgres::connect(&server.url(), NoTls).await.unwrap();
    tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT state::text, log FROM tollgate.state WHERE key = $1",
            &[&format!("{prefix}k")],
        )
        .await
        .unwrap();
    let state: String = row.get(0);
    let log: Vec<i64> = row.get(1);
    let t0 = T0 as u128;
    let tat = t0 * 10 + admitted as u128 * MINUTE as u128;
    assert_eq!(
        state,
        format!("{{{t0},{tat},{t0},{admitted},{t0}}}"),
        "log last; gcra tat, last; window count, last"
    );
    assert_eq!(log, [1, T0 as i64, admitted as i64]);
    let pg = common::config(&server.url())
        .prefix(&prefix)
        .connect()
        .await
        .unwrap();
    let peek = pg.check_at("k", &policy, 0, T0).await.unwrap();
    assert_eq!((peek.limit, peek.remaining), (50, 50 - admitted));
    let denied = pg.check_at("k", &policy, 2, T0).await.unwrap();
    assert_eq!(denied.retry_after, RetryAfter::After(MINUTE - T0 % MINUTE));
}
