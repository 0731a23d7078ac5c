//! PostgreSQL decides exactly like the core: random traces of checks,
//! refunds, forced charges and leases with nanosecond times, every
//! algorithm, single and layered policies.

mod common;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tollgate::{Algorithm, BackendError, Limit, Policy, Quota, State};
use tollgate_core::{decide_all, force_all, lease_all, preview_all, refund_all, Lease};
use tollgate_postgres::{Operation, PostgresBackend};

/// A Unix time in ns (late 2023), so windows align on the epoch with
/// realistic magnitudes.
const T0_NS: u64 = 1_700_000_000_123_456_789;

/// Periods from a few ns to a minute, odd ones included.
const PERIODS_NS: [u64; 5] = [7, 1_000, 999_983, 999_999_937, 60_000_000_000];

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

/// One request: ns since the previous one (sometimes negative, a late
/// arrival), which of three keys, and the operation with its amount.
#[derive(Clone, Debug)]
struct Request {
    step_ns: i64,
    key: usize,
    op: Operation,
}

/// What the core says to `op`, as the store reports it: the cost charged
/// and the numbers; `None` for a lease the core refuses.
fn core(states: &mut [State], limits: &[Limit], op: Operation, now: u64) -> Option<Lease> {
    Some(match op {
        Operation::Check(cost) => {
            let decision = decide_all(states, limits, now, cost);
            let granted = if decision.allowed { cost } else { 0 };
            Lease { granted, decision }
        }
        Operation::Refund(cost) => {
            refund_all(states, limits, now, cost);
            let decision = preview_all(states, limits, now, 0);
            Lease {
                granted: 0,
                decision,
            }
        }
        Operation::Force(cost) => {
            let decision = force_all(states, limits, now, cost);
            Lease {
                granted: cost,
                decision,
            }
        }
        Operation::Lease(max) => lease_all(states, limits, now, max).ok()?,
    })
}

fn trace(span_ns: i64) -> impl Strategy<Value = Vec<Request>> {
    let step = prop_oneof![
        3 => Just(0i64),
        4 => 0..=span_ns,
        1 => -span_ns..0,
        1 => 0..=4 * span_ns,
    ];
    prop::collection::vec(
        (
            step,
            0usize..3,
            0..10u8,
            prop_oneof![1 => Just(0u64), 6 => 1u64..4, 1 => 4u64..20],
        ),
        1..50,
    )
    .prop_map(|v| {
        v.into_iter()
            .map(|(step_ns, key, op, amount)| Request {
                step_ns,
                key,
                op: match op {
                    0 => Operation::Refund(amount),
                    1 => Operation::Force(amount),
                    2 => Operation::Lease(amount),
                    _ => Operation::Check(amount),
                },
            })
            .collect()
    })
}

fn case() -> impl Strategy<Value = (Vec<Limit>, Vec<Request>)> {
    prop::collection::vec(limit(), 1..3).prop_flat_map(|limits| {
        let longest = limits.iter().map(|l| l.quota.period_ns()).max().unwrap();
        let span_ns = longest.clamp(2, 2_000_000_000) as i64;
        (Just(limits), trace(span_ns))
    })
}

#[test]
fn postgres_decides_like_the_core_on_random_traces() {
    let Some(server) = common::shared() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pg: PostgresBackend = rt.block_on(common::backend(&server.url()));
    let case_no = std::cell::Cell::new(0);
    let mut runner = TestRunner::new(Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&case(), |(limits, requests)| {
            case_no.set(case_no.get() + 1);
            let policy = Policy::with_limits(limits.clone()).unwrap();
            let mut states: Vec<Vec<State>> = (0..3)
                .map(|_| {
                    limits
                        .iter()
                        .map(|l| State::new(l.algorithm, &l.quota))
                        .collect()
                })
                .collect();
            let mut now = T0_NS as i64;
            for (i, r) in requests.iter().enumerate() {
                now = (now + r.step_ns).max(0);
                let key = format!("c{}-k{}", case_no.get(), r.key);
                let core = core(&mut states[r.key], &limits, r.op, now as u64);
                let store = rt.block_on(pg.apply_at(&key, &policy, r.op, now as u64));
                match (store, core) {
                    (Ok(store), Some(core)) => {
                        prop_assert_eq!(store, core, "request {} ({:?}) at {}ns", i, r, now)
                    }
                    (Err(BackendError::UnsupportedPolicy(_)), None) => {}
                    (store, core) => {
                        prop_assert!(false, "request {}: {:?} vs {:?}", i, store, core)
                    }
                }
            }
            Ok(())
        })
        .unwrap();
}
