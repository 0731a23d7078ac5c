//! The one-set sliding log: exact like the core when the log is long enough
//! for Redis to keep it as a skiplist (past 128 members), and independent of
//! the two-set log that clients of `tollgate_v3` keep during an upgrade.

mod common;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tollgate::{Algorithm, Limit, Operation, Policy, Quota, State};
use tollgate_testkit::agreement::core;

const T0_US: u64 = 1_700_000_000_000_000;
const SECOND_NS: u64 = 1_000_000_000;

/// Mostly checks of cost 1, so hundreds of requests are live at once, some
/// of other costs, refunds and forced charges; steps of up to 2 ms, some
/// late, a few long pauses.
fn requests() -> impl Strategy<Value = Vec<(i64, Operation)>> {
    let op = prop_oneof![
        15 => Just(Operation::Check(1)),
        5 => (0u64..4).prop_map(Operation::Check),
        1 => (1u64..30).prop_map(Operation::Refund),
        1 => (1u64..30).prop_map(Operation::Force),
    ];
    let step = prop_oneof![90 => 0i64..2_000, 9 => -2_000i64..0, 1 => 0i64..400_000];
    prop::collection::vec((step, op), 300..900)
}

#[test]
fn a_long_log_decides_like_the_core() {
    let Some(server) = common::server() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = rt.block_on(common::backend(&server.url()));
    let case = (150u64..400, requests());
    let mut runner = TestRunner::new(Config {
        cases: 12,
        failure_persistence: None,
        ..Config::default()
    });
    let case_no = std::cell::Cell::new(0);
    let largest = std::cell::Cell::new(0u64);
    runner
        .run(&case, |(limit, trace)| {
            case_no.set(case_no.get() + 1);
            let key = format!("long-{}", case_no.get());
            let limit = Limit::new(Algorithm::SlidingLog, Quota::new(limit, SECOND_NS).unwrap());
            let policy = Policy::new(limit);
            let mut state = [State::new(limit.algorithm, &limit.quota)];
            let mut now = T0_US as i64;
            for (i, (step, op)) in trace.iter().enumerate() {
                now += step;
                let expected = core(&mut state, &[limit], *op, now as u64 * 1000).unwrap();
                let got = rt.block_on(redis.apply_at(&key, &policy, *op, now as u64));
                let expected = tollgate::Lease {
                    decision: common::at_store_resolution(expected.decision),
                    ..expected
                };
                prop_assert_eq!(got.unwrap(), expected, "request {} ({:?})", i, op);
            }
            let log = &redis.redis_keys(&key, &policy).unwrap()[0];
            let members: u64 = server.cli(&["zcard", log]).unwrap().trim().parse().unwrap();
            largest.set(largest.get().max(members));
            Ok(())
        })
        .unwrap();
    // The point of the test: logs beyond the listpack encoding.
    assert!(largest.get() > 128, "at most {} members", largest.get());
}

/// A `tollgate_v3` client keeps its two-set log under its own keys on a
/// server where this version loaded the library: neither version reads
/// the other's state, and the old one still decides.
#[test]
fn the_previous_version_keeps_its_own_log() {
    let Some(server) = common::server() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = rt.block_on(common::backend(&server.url()));
    let policy = Policy::new(Limit::new(
        Algorithm::SlidingLog,
        Quota::new(2, SECOND_NS).unwrap(),
    ));
    // Loads this version's library.
    let d = rt.block_on(redis.check_at("u", &policy, 1, T0_US)).unwrap();
    assert_eq!(d.remaining, 1);
    let keys = redis.redis_keys("u", &policy).unwrap();
    let stem = keys[0].trim_end_matches(":log");
    let old: Vec<String> = ["t", "c", "l"]
        .iter()
        .map(|s| format!("{stem}:{s}"))
        .collect();
    let v3 = |cost: &str| {
        let mut args = vec!["fcall", "tollgate_v3", "3"];
        args.extend(old.iter().map(String::as_str));
        let now = (T0_US + 10).to_string();
        args.extend([now.as_str(), "0", "check", cost, "1"]);
        args.extend(["sliding_log", "2", "1000000", "1", "9007199254740992"]);
        server.cli(&args).unwrap()
    };
    // allowed, charged, then allowed, remaining, retry, reset, delay.
    let replies: Vec<Vec<i64>> = ["1", "1", "1"]
        .iter()
        .map(|cost| {
            v3(cost)
                .split_whitespace()
                .map(|v| v.parse().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(replies[0][..4], [1, 1, 1, 1]);
    assert_eq!(replies[1][..4], [1, 1, 1, 0]);
    assert_eq!(replies[2][..4], [0, 0, 0, 0], "the old log is full");
    assert_eq!(server.cli(&["zcard", &old[0]]).unwrap().trim(), "2");
    assert_eq!(server.cli(&["zcard", &old[1]]).unwrap().trim(), "2");
    // This version's log still holds its one request.
    let d = rt
        .block_on(redis.check_at("u", &policy, 1, T0_US + 20))
        .unwrap();
    assert!(d.allowed && d.remaining == 0);
    assert_eq!(server.cli(&["zcard", &keys[0]]).unwrap().trim(), "2");
}
