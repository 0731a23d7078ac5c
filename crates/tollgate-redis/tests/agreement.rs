//! Redis decides exactly like the core: random traces of checks, refunds,
//! forced charges and leases with microsecond times, every algorithm,
//! single and layered policies, through `FCALL` and through `EVALSHA`.

mod common;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tollgate::{Algorithm, BackendError, Decision, Lease, Limit, Policy, Quota, State};
use tollgate_core::{decide_all, force_all, lease_all, preview_all, refund_all};
use tollgate_redis::{Operation, ScriptMode};

/// A Unix time in microseconds (late 2023), so windows align on the epoch
/// with realistic magnitudes.
const T0_US: u64 = 1_700_000_000_123_456;

/// Periods that exercise the unit reduction: whole microseconds, a period
/// shorter than the clock's tick ratio, and an odd one of ~1 s.
const PERIODS_NS: [u64; 5] = [1_000, 7_000, 1_000_000, 999_999_937, 60_000_000_000];

fn limit() -> impl Strategy<Value = Limit> {
    (
        0..Algorithm::ALL.len(),
        1u64..12,
        0..PERIODS_NS.len(),
        1u64..15,
    )
        .prop_map(|(a, limit, p, burst)| {
            let quota = Quota::with_parts(limit, PERIODS_NS[p], burst).unwrap();
            Limit::new(Algorithm::ALL[a], quota)
        })
}

/// One request: microseconds since the previous one (sometimes negative, a
/// late arrival), which of three keys, and the operation.
#[derive(Clone, Debug)]
struct Request {
    step_us: i64,
    key: usize,
    op: Operation,
}

fn operation() -> impl Strategy<Value = Operation> {
    let cost = || prop_oneof![1 => Just(0u64), 6 => 1u64..4, 1 => 4u64..20];
    prop_oneof![
        8 => cost().prop_map(Operation::Check),
        1 => prop_oneof![cost(), Just(u64::MAX)].prop_map(Operation::Refund),
        1 => (0u64..40).prop_map(Operation::Force),
        2 => cost().prop_map(Operation::Lease),
    ]
}

/// The core's answer to `op` on one key's states: the cost charged and the
/// decision (for a refund, the key's numbers after it).
fn core(states: &mut [State], limits: &[Limit], now: u64, op: Operation) -> Option<Lease> {
    let charged = |cost, decision: Decision| Lease {
        granted: if decision.allowed { cost } else { 0 },
        decision,
    };
    Some(match op {
        Operation::Check(cost) => charged(cost, decide_all(states, limits, now, cost)),
        Operation::Refund(cost) => {
            refund_all(states, limits, now, cost);
            charged(0, preview_all(states, limits, now, 0))
        }
        Operation::Force(cost) => charged(cost, force_all(states, limits, now, cost)),
        Operation::Lease(max) => lease_all(states, limits, now, max).ok()?,
    })
}

fn trace(span_us: i64) -> impl Strategy<Value = Vec<Request>> {
    let step = prop_oneof![
        3 => Just(0i64),
        4 => 0..=span_us,
        1 => -span_us..0,
        1 => 0..=4 * span_us,
    ];
    prop::collection::vec((step, 0usize..3, operation()), 1..50).prop_map(|v| {
        v.into_iter()
            .map(|(step_us, key, op)| Request { step_us, key, op })
            .collect()
    })
}

fn case() -> impl Strategy<Value = (Vec<Limit>, Vec<Request>)> {
    prop::collection::vec(limit(), 1..3).prop_flat_map(|limits| {
        let longest = limits.iter().map(|l| l.quota.period_ns()).max().unwrap();
        let span_us = (longest / 1000).clamp(2, 2_000_000) as i64;
        (Just(limits), trace(span_us))
    })
}

#[test]
fn redis_decides_like_the_core_on_random_traces() {
    let Some(server) = common::server() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Every other case goes through EVALSHA instead of FCALL: one Lua source.
    let functions = rt.block_on(common::backend(&server.url()));
    let eval = rt
        .block_on(
            common::config(&server.url())
                .mode(ScriptMode::Eval)
                .connect(),
        )
        .unwrap();
    let case_no = std::cell::Cell::new(0);
    let mut runner = TestRunner::new(Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&case(), |(limits, requests)| {
            case_no.set(case_no.get() + 1);
            let redis = if case_no.get() % 2 == 0 {
                &functions
            } else {
                &eval
            };
            let policy = Policy::with_limits(limits.clone()).unwrap();
            let mut states: Vec<Vec<State>> = (0..3)
                .map(|_| {
                    limits
                        .iter()
                        .map(|l| State::new(l.algorithm, &l.quota))
                        .collect()
                })
                .collect();
            let mut now = T0_US as i64;
            for (i, r) in requests.iter().enumerate() {
                now = (now + r.step_us).max(0);
                let key = format!("c{}-k{}", case_no.get(), r.key);
                let core = core(&mut states[r.key], &limits, now as u64 * 1000, r.op);
                let store = rt.block_on(redis.apply_at(&key, &policy, r.op, now as u64));
                match (store, core) {
                    (Ok(store), Some(core)) => prop_assert_eq!(
                        store,
                        Lease {
                            decision: common::at_store_resolution(core.decision),
                            ..core
                        },
                        "request {} ({:?}) at {}us",
                        i,
                        r,
                        now
                    ),
                    // Only a lease of a sliding log is refused, by both.
                    (Err(BackendError::UnsupportedPolicy(why)), None) => {
                        prop_assert!(why.contains("sliding_log cannot lease"), "{}", why)
                    }
                    (store, core) => prop_assert!(false, "store {:?}, core {:?}", store, core),
                }
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_eval_path_decides_like_the_function_path() {
    let Some(server) = common::server() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let functions = common::backend(&server.url()).await;
        let eval = common::config(&server.url())
            .mode(ScriptMode::Eval)
            .connect()
            .await
            .unwrap();
        assert!(functions.uses_functions() && !eval.uses_functions());
        for algorithm in Algorithm::ALL {
            let quota = Quota::with_parts(3, 1_000_000, 4).unwrap();
            let policy = Policy::new(Limit::new(algorithm, quota));
            for (t, cost) in [(0, 1), (10, 2), (20, 3), (700, 1), (2_500, 5)] {
                let at = T0_US + t;
                let a = functions.check_at("k", &policy, cost, at).await.unwrap();
                let b = eval.check_at("k", &policy, cost, at).await.unwrap();
                assert_eq!(a, b, "{algorithm} at +{t}us");
            }
        }
    });
}
