//! The one-statement charge of a single token bucket, GCRA or leaky meter
//! (`sql/bucket_charge.sql`) decides like the core at the edges of the
//! range, where its ticks pass 2^64: limits and bursts of 1 and 10^12,
//! periods up to 2^62 ns, times up to 2^63 - 1 ns, costs up to the burst
//! and past it, and charges after a forced debt (which the statement leaves
//! to `_apply`). Every row is kept until its key is back to a fresh one's
//! state: its `idle_at` is never before the decision's reset.

mod common;

use std::time::Duration;

use proptest::prelude::*;
use tokio_postgres::NoTls;
use tollgate::{Algorithm, Limit, Operation, Policy, Quota};
use tollgate_core::State;
use tollgate_postgres::exact::MAX_TIME_NS;
use tollgate_testkit::agreement::core;

fn edge_limit() -> impl Strategy<Value = Limit> {
    let edge = |values: Vec<u64>| proptest::sample::select(values);
    (
        edge(vec![4, 5, 6]),
        edge(vec![1, 7, Quota::MAX_LIMIT]),
        edge(vec![1, 999_999_937, Quota::MAX_SPAN_NS]),
        edge(vec![1, 3, Quota::MAX_LIMIT]),
    )
        .prop_filter_map("a quota the core accepts", |(code, l, p, b)| {
            let algorithm = Algorithm::ALL[code as usize - 1];
            Some(Limit::new(algorithm, Quota::with_parts(l, p, b).ok()?))
        })
}

/// Mostly charges from one unit to one past the burst, some forced.
fn operations(burst: u64) -> impl Strategy<Value = Vec<(u64, Operation)>> {
    let cost = prop_oneof![Just(1), Just(burst / 2 + 1), Just(burst), Just(burst + 1)];
    let op = prop_oneof![
        6 => cost.prop_map(Operation::Check),
        1 => proptest::sample::select(vec![1, burst]).prop_map(Operation::Force),
    ];
    let step = prop_oneof![Just(0u64), 1u64..1_000, Just(u64::MAX >> 3)];
    prop::collection::vec((step, op), 1..12)
}

#[test]
fn the_one_statement_charge_decides_like_the_core_at_the_range_edges() {
    let Some(server) = common::shared() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    // No floor on replayed rows: idle_at is their state's own.
    let pg = rt
        .block_on(
            common::config(&server.url())
                .prefix("edges:")
                .replay_floor(Duration::ZERO)
                .connect(),
        )
        .unwrap();
    let db = rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&server.url(), NoTls).await.unwrap();
        tokio::spawn(conn);
        client
    });
    let case = edge_limit().prop_flat_map(|limit| (Just(limit), operations(limit.quota.burst())));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(48));
    let cases = std::sync::atomic::AtomicUsize::new(0);
    runner
        .run(&case, |(limit, ops)| {
            // A key per case (shrinking reruns too): each starts fresh.
            let key = format!(
                "edge-{}",
                cases.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            let policy = Policy::new(limit);
            let mut states = vec![State::new(limit.algorithm, &limit.quota)];
            // Late in the time range: t * limit is far past 2^64 ticks.
            let mut now = MAX_TIME_NS - (u64::MAX >> 2);
            for (step, op) in ops {
                now = now.saturating_add(step).min(MAX_TIME_NS);
                let expected = core(&mut states, &[limit], op, now).unwrap();
                let got = rt.block_on(pg.apply_at(&key, &policy, op, now)).unwrap();
                prop_assert_eq!(got, expected, "{:?} at {} on {:?}", op, now, limit);
                let idle_at: Option<i64> = rt
                    .block_on(db.query_opt(
                        &format!("SELECT idle_at FROM {} WHERE key = $1", pg.table()),
                        &[&format!("edges:{key}")],
                    ))
                    .unwrap()
                    .map(|row| row.get(0));
                // A key already back to a fresh state may go at any time.
                if let (Some(idle_at), 1..) = (idle_at, expected.decision.reset_after) {
                    // Saturated at the largest bigint, as the row's is.
                    let idle = u128::from(now) + u128::from(expected.decision.reset_after);
                    prop_assert!(
                        i128::from(idle_at) >= idle.min(i64::MAX as u128) as i128,
                        "idle_at {} before the reset at {} ({:?} at {} on {:?})",
                        idle_at,
                        idle,
                        op,
                        now,
                        limit
                    );
                }
            }
            Ok(())
        })
        .unwrap();
}
