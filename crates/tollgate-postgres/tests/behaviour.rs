//! What the store does besides deciding: one row per key and policy,
//! written only by charges; the sliding log's entries; layered limits; the
//! schema's creation racing; the idle-row cleanup; keys and names.

mod common;

use tokio_postgres::NoTls;
use tollgate::{
    Algorithm, Backend, BackendError, BackendExt, Limit, Policy, Quota, RetryAfter, Store,
};
use tollgate_postgres::{PostgresBackend, PostgresConfig};

const MINUTE: u64 = 60_000_000_000;
const T0: u64 = 1_700_000_000_000_000_000;

fn policy(algorithm: Algorithm, limit: u64, period: u64) -> Policy {
    Policy::new(Limit::new(algorithm, Quota::new(limit, period).unwrap()))
}

/// A plain client of the server, for looking at the table.
async fn client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

async fn rows(client: &tokio_postgres::Client, table: &str, key_prefix: &str) -> i64 {
    client
        .query_one(
            &format!("SELECT count(*) FROM {table} WHERE starts_with(key, $1)"),
            &[&key_prefix],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn only_charges_write_one_row_per_key_and_policy() {
    let Some(server) = common::shared() else {
        return;
    };
    let prefix = common::fresh_prefix();
    let pg = common::config(&server.url())
        .prefix(&prefix)
        .connect()
        .await
        .unwrap();
    let db = client(&server.url()).await;
    let layered = Policy::with_limits(vec![
        Limit::new(Algorithm::SlidingLog, Quota::new(2, MINUTE).unwrap()),
        Limit::new(Algorithm::Gcra, Quota::new(5, MINUTE).unwrap()),
    ])
    .unwrap();
    let layered = pg.prepare(&layered).unwrap();
    for algorithm in Algorithm::ALL {
        let p = policy(algorithm, 3, MINUTE);
        let p = pg.prepare(&p).unwrap();
        assert_eq!(
            pg.check("k", &p, 0).await.unwrap().remaining,
            p.limits()[0].capacity()
        );
        assert!(!pg.check("k", &p, 100).await.unwrap().allowed);
    }
    assert_eq!(
        rows(&db, &pg.table(), &prefix).await,
        0,
        "peeks and denials write nothing"
    );
    for algorithm in Algorithm::ALL {
        assert!(
            pg.check("k", &pg.prepare(&policy(algorithm, 3, MINUTE)).unwrap(), 1)
                .await
                .unwrap()
                .allowed
        );
    }
    assert!(pg.check("k", &layered, 1).await.unwrap().allowed);
    assert_eq!(rows(&db, &pg.table(), &prefix).await, 8);
    pg.reset("k", &layered).await.unwrap();
    assert_eq!(rows(&db, &pg.table(), &prefix).await, 7);
    assert_eq!(pg.check("k", &layered, 0).await.unwrap().remaining, 2);
}

#[tokio::test]
async fn requests_at_one_instant_share_a_log_entry_and_all_count() {
    let Some(server) = common::shared() else {
        return;
    };
    let pg = common::backend(&server.url()).await;
    let log = policy(Algorithm::SlidingLog, 3, MINUTE);
    for expected_remaining in [2, 1] {
        let d = pg.check_at("k", &log, 1, T0).await.unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, expected_remaining);
    }
    assert!(!pg.check_at("k", &log, 2, T0).await.unwrap().allowed);
    // Both leave together one period later, to the nanosecond.
    assert!(
        !pg.check_at("k", &log, 3, T0 + MINUTE - 1)
            .await
            .unwrap()
            .allowed
    );
    assert!(
        pg.check_at("k", &log, 3, T0 + MINUTE)
            .await
            .unwrap()
            .allowed
    );
}

#[tokio::test]
async fn layered_limits_charge_all_or_none() {
    let Some(server) = common::shared() else {
        return;
    };
    let pg = common::backend(&server.url()).await;
    let window = Limit::new(Algorithm::FixedWindow, Quota::new(2, MINUTE).unwrap());
    let bucket = Limit::new(Algorithm::TokenBucket, Quota::new(5, MINUTE).unwrap());
    let both = Policy::with_limits(vec![bucket, window]).unwrap();
    for _ in 0..2 {
        assert!(pg.check_at("u", &both, 1, T0).await.unwrap().allowed);
    }
    let denied = pg.check_at("u", &both, 1, T0).await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(
        (denied.limit, denied.remaining),
        (2, 0),
        "the tighter limit reports"
    );
    // A cost the bucket alone still admits, after the window rolls over:
    // had the denial charged the bucket, 3 would not fit.
    let later = pg.check_at("u", &both, 2, T0 + MINUTE).await.unwrap();
    assert!(later.allowed);
}

#[tokio::test]
async fn the_schema_is_created_once_by_racing_instances() {
    let Some(server) = common::shared() else {
        return;
    };
    let url = server.url();
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let config = common::config(&url).schema("race_schema").table("limits");
            tokio::spawn(config.run_migrations())
        })
        .collect();
    let mut fresh = 0;
    for racer in racers {
        let migration = racer.await.unwrap().unwrap();
        assert_eq!(migration.to, tollgate_postgres::SCHEMA_VERSION);
        fresh += (migration.from == 0) as usize;
    }
    assert_eq!(fresh, 1, "exactly one instance created the schema");
    let db = client(&url).await;
    let versions: i64 = db
        .query_one("SELECT count(*) FROM race_schema.limits_version", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        versions,
        i64::from(tollgate_postgres::SCHEMA_VERSION),
        "one row per version"
    );
    // Usable without migrating again.
    let pg = common::config(&url)
        .schema("race_schema")
        .table("limits")
        .migrate(false)
        .connect()
        .await
        .unwrap();
    assert!(
        pg.check(
            "k",
            &pg.prepare(&policy(Algorithm::Gcra, 1, MINUTE)).unwrap(),
            1
        )
        .await
        .unwrap()
        .allowed
    );
}

/// A schema left at version 2 by an older tollgate, with keys charged
/// through it, is brought to the current version in place: its rows keep
/// their state, and new charges (the one-statement charge included) go on
/// from it.
#[tokio::test]
async fn a_version_2_schema_is_migrated_and_its_keys_keep_their_state() {
    let Some(server) = common::shared() else {
        return;
    };
    let url = server.url();
    let db = client(&url).await;
    let render = |sql: &str| {
        sql.replace("@T@", "old_schema.limits")
            .replace("@S@", "old_schema")
            .replace("@N@", "limits")
    };
    db.batch_execute(&render(include_str!("../sql/schema.sql")))
        .await
        .unwrap();
    db.batch_execute(&render(include_str!("../sql/deadline.sql")))
        .await
        .unwrap();
    db.batch_execute(
        "CREATE TABLE old_schema.limits_version (version int NOT NULL);
         INSERT INTO old_schema.limits_version VALUES (1), (2);",
    )
    .await
    .unwrap();
    let second = 1_000_000_000;
    let bucket = Policy::new(Limit::new(
        Algorithm::TokenBucket,
        Quota::with_parts(10, second, 100).unwrap(),
    ));
    let gcra = policy(Algorithm::Gcra, 10, MINUTE);
    // Version 2's function charges the keys, as the older tollgate did.
    let charges = [
        ("b", &bucket, "{4,10,1000000000,100}", 60_i64),
        ("g", &gcra, "{5,10,60000000000,10}", 4),
    ];
    for (key, p, limits, cost) in charges {
        let charged = db
            .query_one(
                "SELECT old_schema.limits_apply_within($1, $2, $3::text::bigint[], 0::smallint, \
                 $4::bigint::numeric, $5, 0, NULL)",
                &[
                    &key,
                    &policy_id(&url, p).await,
                    &limits,
                    &cost,
                    &(T0 as i64),
                ],
            )
            .await;
        assert!(charged.is_ok(), "{charged:?}");
    }
    let migration = common::config(&url)
        .schema("old_schema")
        .table("limits")
        .run_migrations()
        .await
        .unwrap();
    assert_eq!(
        (migration.from, migration.to),
        (2, tollgate_postgres::SCHEMA_VERSION)
    );
    let pg = common::config(&url)
        .schema("old_schema")
        .table("limits")
        .prefix("")
        .migrate(false)
        .connect()
        .await
        .unwrap();
    // The bucket had 40 left at T0 and refills 10 a second.
    let d = pg.check_at("b", &bucket, 45, T0 + second).await.unwrap();
    assert!(d.allowed, "{d:?}");
    assert_eq!(d.remaining, 5);
    // GCRA had 4 of its 10 taken at T0: 6 more fit, then none.
    assert!(pg.check_at("g", &gcra, 6, T0).await.unwrap().allowed);
    assert!(!pg.check_at("g", &gcra, 1, T0).await.unwrap().allowed);
}

/// The id a backend files `policy`'s rows under, read back from a charge.
async fn policy_id(url: &str, policy: &Policy) -> i64 {
    let prefix = common::fresh_prefix();
    let pg = common::config(url).prefix(&prefix).connect().await.unwrap();
    pg.check_at("probe", policy, 1, T0).await.unwrap();
    client(url)
        .await
        .query_one(
            &format!("SELECT policy FROM {} WHERE key = $1", pg.table()),
            &[&format!("{prefix}probe")],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_missing_schema_or_a_bad_name_is_a_clear_error() {
    let Some(server) = common::shared() else {
        return;
    };
    let pg = common::config(&server.url())
        .schema("never_created")
        .migrate(false)
        .connect()
        .await
        .unwrap();
    let err = pg
        .check(
            "k",
            &pg.prepare(&policy(Algorithm::Gcra, 1, MINUTE)).unwrap(),
            1,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, BackendError::Store(ref m) if m.contains("tollgate migrate")),
        "{err}"
    );
    for (schema, table) in [("Bad", "t"), ("s", "t;drop"), ("s", "")] {
        let err = common::config(&server.url())
            .schema(schema)
            .table(table)
            .connect()
            .await
            .err()
            .unwrap();
        assert!(matches!(err, BackendError::InvalidKey(_)), "{err}");
    }
}

#[tokio::test]
async fn cleanup_deletes_only_idle_rows() {
    let Some(server) = common::shared() else {
        return;
    };
    // Its own table, and replayed rows kept no longer than their state says.
    let pg = common::config(&server.url())
        .table("cleanup_test")
        .replay_floor(std::time::Duration::ZERO)
        .connect()
        .await
        .unwrap();
    let db = client(&server.url()).await;
    let second = 1_000_000_000;
    let p = policy(Algorithm::TokenBucket, 10, 10 * second); // one token a second
                                                             // k0 took 1 token at T0 (full again at T0 + 1 s); k1 took 5 (T0 + 5 s);
    let p = pg.prepare(&p).unwrap();
    // k2 took 10 at T0 + 2 s (T0 + 12 s).
    pg.check_at("k0", &p, 1, T0).await.unwrap();
    pg.check_at("k1", &p, 5, T0).await.unwrap();
    pg.check_at("k2", &p, 10, T0 + 2 * second).await.unwrap();
    assert_eq!(rows(&db, &pg.table(), "").await, 3);
    let at = |t: u64| Some(t as i64);
    assert_eq!(pg.cleanup_at(100, at(T0 + second - 1)).await.unwrap(), 0);
    assert_eq!(pg.cleanup_at(100, at(T0 + 5 * second)).await.unwrap(), 2);
    assert_eq!(rows(&db, &pg.table(), "").await, 1);
    // k2 is still charged: its decisions are unchanged by the cleanup.
    let d = pg.check_at("k2", &p, 10, T0 + 5 * second).await.unwrap();
    assert_eq!(d.retry_after, RetryAfter::After(7 * second));
    // Bounded: one row per call with a batch of 1.
    for k in 0..3 {
        pg.check_at(&format!("b{k}"), &p, 1, T0).await.unwrap();
    }
    assert_eq!(pg.cleanup_at(1, at(T0 + 2 * second)).await.unwrap(), 1);
    assert_eq!(pg.cleanup_at(10, at(T0 + 2 * second)).await.unwrap(), 2);
    // On the database clock k2's times (2023) are long past; a row charged
    // now is not idle.
    pg.check("live", &p, 1).await.unwrap();
    assert_eq!(pg.cleanup(100).await.unwrap(), 1);
    assert_eq!(rows(&db, &pg.table(), "").await, 1);
    // The cleanup finds rows through the idle_at index.
    let plan: Vec<String> = db
        .query(
            &format!(
                "EXPLAIN SELECT key FROM {} WHERE idle_at <= 0 ORDER BY idle_at LIMIT 10",
                pg.table()
            ),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        plan.iter().any(|l| l.contains("cleanup_test_idle_at")),
        "{plan:?}"
    );
}

#[tokio::test]
async fn awkward_keys_are_stored_hashed_and_keep_their_state() {
    let Some(server) = common::shared() else {
        return;
    };
    let pg = common::backend(&server.url()).await;
    let p = policy(Algorithm::Gcra, 10, MINUTE);
    let p = pg.prepare(&p).unwrap();
    assert!(matches!(
        pg.check("", &p, 1).await,
        Err(BackendError::InvalidKey(_))
    ));
    for key in ["k".repeat(10_000), "nul\0byte".into(), "#hash".into()] {
        assert!(pg.check_at(&key, &p, 1, T0).await.unwrap().allowed);
        let d = pg.check_at(&key, &p, 10, T0).await.unwrap();
        assert_eq!(d.retry_after, RetryAfter::After(6_000_000_000), "{key:.20}");
    }
}

#[tokio::test]
async fn the_store_switches_from_memory_to_postgres_in_one_line() {
    let Some(server) = common::shared() else {
        return;
    };
    let p = policy(Algorithm::TokenBucket, 3, MINUTE);
    let memory = Store::new(p.clone(), tollgate::MemoryBackend::new()).unwrap();
    let postgres: Store<PostgresBackend> =
        Store::new(p, common::backend(&server.url()).await).unwrap();
    for cost in [1, 1, 2, 1, 4] {
        let (a, b) = (
            memory.check_cost("k", cost).await.unwrap(),
            postgres.check_cost("k", cost).await.unwrap(),
        );
        // Decided microseconds apart on two clocks: the same verdicts.
        assert_eq!((a.allowed, a.limit), (b.allowed, b.limit), "cost {cost}");
    }
    postgres.reset("k").await.unwrap();
    assert_eq!(postgres.peek("k").await.unwrap().remaining, 3);
    let _ = PostgresConfig::new("unused");
}

#[tokio::test]
async fn refund_force_and_lease_through_the_store() {
    let Some(server) = common::shared() else {
        return;
    };
    let pg = common::backend(&server.url()).await;
    let bucket = Store::new(policy(Algorithm::TokenBucket, 10, MINUTE), &pg).unwrap();
    let lease = bucket.lease("k", 4).await.unwrap();
    assert_eq!((lease.granted, lease.decision.remaining), (4, 6));
    assert_eq!(bucket.refund("k", 1).await.unwrap().remaining, 7);
    // A forced charge goes into debt: 7 tokens left, 10 taken.
    let forced = bucket.force("k", 10).await.unwrap();
    assert!(forced.allowed);
    assert_eq!(forced.remaining, 0);
    let denied = bucket.check("k").await.unwrap();
    assert!(!denied.allowed);
    // 3 tokens of debt and 1 more to take: 4 intervals of 6 s, minus the
    // time since (microseconds).
    let RetryAfter::After(wait) = denied.retry_after else {
        panic!("{denied:?}")
    };
    assert!(wait > 23_000_000_000 && wait <= 24_000_000_000, "{wait}");
    let nothing = bucket.lease("k", 5).await.unwrap();
    assert_eq!(nothing.granted, 0);
    assert!(!nothing.decision.allowed, "the decision on one unit");

    let log = Store::new(policy(Algorithm::SlidingLog, 10, MINUTE), &pg).unwrap();
    assert!(matches!(
        log.lease("k", 1).await,
        Err(BackendError::UnsupportedPolicy(_))
    ));
    assert_eq!(log.force("k", 3).await.unwrap().remaining, 7);
    assert!(matches!(
        log.force("k", u64::MAX).await,
        Err(BackendError::OutOfRange(_))
    ));
    assert_eq!(log.peek("k").await.unwrap().remaining, 7, "nothing changed");
}
