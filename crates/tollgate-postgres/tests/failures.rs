//! Failures become typed errors within the deadline, never a hang: a row
//! lock held past `statement_timeout`, an exhausted pool, a read-only
//! database, a server stopped and restarted, a server gone; and no
//! password ever appears in a message.

mod common;

use std::time::{Duration, Instant};

use tokio_postgres::NoTls;
use tollgate::{Algorithm, Backend, BackendError, BackendExt, Limit, Policy, Quota};
use tollgate_postgres::PostgresConfig;

const MINUTE: u64 = 60_000_000_000;

/// 100 an hour in a log: nothing leaves it while a test runs, however slow.
fn policy() -> Policy {
    Policy::new(Limit::new(
        Algorithm::SlidingLog,
        Quota::new(100, 60 * MINUTE).unwrap(),
    ))
}

/// Generous for a machine busy compiling, far below a hang.
const PROMPTLY: Duration = Duration::from_secs(2);

async fn client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

#[tokio::test]
async fn a_row_locked_past_the_statement_timeout_is_a_timeout() {
    let Some(server) = common::shared() else {
        return;
    };
    let prefix = common::fresh_prefix();
    let deadline = Duration::from_millis(200);
    let pg = common::config(&server.url())
        .prefix(&prefix)
        .timeout(deadline)
        .connect()
        .await
        .unwrap();
    assert!(
        pg.check("locked", &pg.prepare(&policy()).unwrap(), 1)
            .await
            .unwrap()
            .allowed
    );
    // Another session holds the key's row.
    let mut holder = client(&server.url()).await;
    let tx = holder.transaction().await.unwrap();
    let locked = tx
        .execute(
            &format!("SELECT 1 FROM {} WHERE key = $1 FOR UPDATE", pg.table()),
            &[&format!("{prefix}locked")],
        )
        .await
        .unwrap();
    assert_eq!(locked, 1);
    let start = Instant::now();
    let result = pg.check("locked", &pg.prepare(&policy()).unwrap(), 1).await;
    assert!(
        matches!(result, Err(BackendError::Timeout(d)) if d == deadline),
        "{result:?}"
    );
    assert!(start.elapsed() < PROMPTLY, "took {:?}", start.elapsed());
    // Other keys are not held up, and the key is usable once released.
    assert!(
        pg.check("free", &pg.prepare(&policy()).unwrap(), 1)
            .await
            .unwrap()
            .allowed
    );
    tx.rollback().await.unwrap();
    let d = pg
        .check("locked", &pg.prepare(&policy()).unwrap(), 1)
        .await
        .unwrap();
    assert_eq!(d.remaining, 98, "the timed-out call charged nothing");
}

#[tokio::test]
async fn an_exhausted_pool_is_a_timeout() {
    let Some(server) = common::shared() else {
        return;
    };
    let deadline = Duration::from_millis(100);
    let pg = common::config(&server.url())
        .pool_size(1)
        .timeout(deadline)
        .connect()
        .await
        .unwrap();
    let busy = pg.pool().get().await.unwrap();
    let start = Instant::now();
    let result = pg.check("k", &pg.prepare(&policy()).unwrap(), 1).await;
    assert!(
        matches!(result, Err(BackendError::Timeout(d)) if d == deadline),
        "{result:?}"
    );
    assert!(start.elapsed() < PROMPTLY);
    drop(busy);
    assert!(
        pg.check("k", &pg.prepare(&policy()).unwrap(), 1)
            .await
            .unwrap()
            .allowed
    );
}

#[tokio::test]
async fn a_read_only_database_is_reported_unavailable() {
    let Some(server) = common::own() else {
        return;
    };
    let pg = common::backend(&server.url()).await;
    assert!(
        pg.check("k", &pg.prepare(&policy()).unwrap(), 1)
            .await
            .unwrap()
            .allowed
    );
    let admin = client(&server.url()).await;
    // What a hot standby refuses: any write, and row locks.
    for sql in [
        "ALTER SYSTEM SET default_transaction_read_only = on",
        "SELECT pg_reload_conf()",
    ] {
        admin.batch_execute(sql).await.unwrap();
    }
    let start = Instant::now();
    let result = loop {
        // The reload reaches the pooled session at its next command.
        match pg.check("k", &pg.prepare(&policy()).unwrap(), 1).await {
            Ok(_) if start.elapsed() < PROMPTLY => continue,
            other => break other,
        }
    };
    assert!(
        matches!(result, Err(BackendError::Unavailable(ref m)) if m.contains("read-only")),
        "{result:?}"
    );
    for sql in [
        "ALTER SYSTEM RESET default_transaction_read_only",
        "SELECT pg_reload_conf()",
    ] {
        admin.batch_execute(sql).await.unwrap();
    }
}

#[tokio::test]
async fn a_stopped_server_fails_fast_and_a_restarted_one_is_used_again() {
    let Some(mut server) = common::own() else {
        return;
    };
    let pg = common::config(&server.url())
        .timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let log = policy();
    let log = pg.prepare(&log).unwrap();
    for _ in 0..10 {
        assert!(pg.check("r", &log, 1).await.unwrap().allowed);
    }
    server.stop().unwrap();
    for _ in 0..3 {
        let start = Instant::now();
        let result = pg.check("r", &log, 1).await;
        assert!(
            matches!(
                result,
                Err(BackendError::Unavailable(_) | BackendError::Timeout(_))
            ),
            "{result:?}"
        );
        assert!(start.elapsed() < PROMPTLY, "took {:?}", start.elapsed());
    }
    server.resume().unwrap();
    let start = Instant::now();
    let decision = loop {
        match pg.check("r", &log, 1).await {
            Ok(d) => break d,
            Err(BackendError::Unavailable(_) | BackendError::Timeout(_)) => {
                assert!(start.elapsed() < Duration::from_secs(10), "no recovery");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("unexpected error after the restart: {e}"),
        }
    };
    assert!(decision.allowed);
    assert_eq!(decision.remaining, 89, "the state survived the restart");
}

#[tokio::test]
async fn a_server_gone_is_unavailable_and_the_password_never_shows() {
    let Some(server) = common::own() else {
        return;
    };
    let secret = "hunter2-not-to-be-seen";
    let url = format!(
        "postgres://tollgate:{secret}@127.0.0.1:{}/postgres",
        server.port()
    );
    let pg = common::config(&url)
        .timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    drop(server);
    let start = Instant::now();
    let err = pg
        .check("k", &pg.prepare(&policy()).unwrap(), 1)
        .await
        .unwrap_err();
    assert!(start.elapsed() < PROMPTLY);
    assert!(
        matches!(err, BackendError::Unavailable(_) | BackendError::Timeout(_)),
        "{err}"
    );
    let refused = PostgresConfig::new(&url)
        .connect_timeout(Duration::from_millis(500))
        .connect()
        .await
        .err()
        .unwrap();
    assert!(matches!(refused, BackendError::Unavailable(_)), "{refused}");
    let garbled = PostgresConfig::new(format!("postgres://u:{secret}@[bad"))
        .connect()
        .await
        .err()
        .unwrap();
    let config = PostgresConfig::new(&url);
    for shown in [
        err.to_string(),
        refused.to_string(),
        garbled.to_string(),
        format!("{config:?}"),
    ] {
        assert!(!shown.contains(secret), "{shown}");
    }
}

/// A call carries its deadline on the database clock: three calls time out
/// while the server is frozen, start once it runs again, and charge nothing,
/// whether `_apply_within` decides them (a fixed window) or the
/// one-statement charge (GCRA).
#[tokio::test]
async fn a_call_started_past_its_deadline_charges_nothing() {
    let Some(server) = common::own() else {
        return;
    };
    let pg = common::config(&server.url())
        .prefix(common::fresh_prefix())
        .timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let policies = [Algorithm::FixedWindow, Algorithm::Gcra].map(|algorithm| {
        let p = Policy::new(Limit::new(algorithm, Quota::new(10, 60 * MINUTE).unwrap()));
        pg.prepare(&p).unwrap()
    });
    for p in &policies {
        assert_eq!(pg.check("k", p, 1).await.unwrap().remaining, 9);
    }
    server.freeze().unwrap();
    for _ in 0..3 {
        for p in &policies {
            let result = pg.check("k", p, 1).await;
            assert!(
                matches!(result, Err(BackendError::Timeout(_))),
                "{result:?}"
            );
        }
    }
    server.thaw().unwrap();
    // The held statements are on other pooled connections than the peek:
    // wait until the server answers, then give them time to run.
    let start = Instant::now();
    while let Err(e) = pg.check("k", &policies[0], 0).await {
        assert!(start.elapsed() < Duration::from_secs(10), "{e}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for p in &policies {
        let peek = pg.check("k", p, 0).await.unwrap();
        assert_eq!(
            peek.remaining, 9,
            "the three timed-out calls charged nothing"
        );
    }
}
