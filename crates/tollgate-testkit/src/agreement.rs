//! A store decides exactly like the core: random traces of checks, refunds,
//! forced charges and leases over three keys, with late arrivals, every
//! algorithm, single and layered policies.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tollgate::{
    decide_all, force_all, lease_all, preview_all, refund_all, Algorithm, BackendError, Decision,
    Lease, Limit, Operation, Policy, Quota, State,
};

/// A Unix time in ns (late 2023), so windows align on the epoch with
/// realistic magnitudes; a store with a coarser clock starts at this time in
/// its own unit.
pub const T0_NS: u64 = 1_700_000_000_123_456_789;

/// Keys per trace.
const KEYS: usize = 3;

/// One request of a trace: the time since the previous one in the store's
/// unit (negative for a late arrival), which key, and the operation.
#[derive(Clone, Debug)]
pub struct Request {
    /// Time since the previous request, in the store's unit.
    pub step: i64,
    /// Which of the trace's keys.
    pub key: usize,
    /// What is asked.
    pub op: Operation,
}

/// A limit of any algorithm with a small limit and burst (so traces reach
/// the refusals) and a period from `periods_ns`.
pub fn limit(periods_ns: &'static [u64]) -> impl Strategy<Value = Limit> {
    (
        0..Algorithm::ALL.len(),
        1u64..12,
        0..periods_ns.len(),
        1u64..15,
    )
        .prop_map(move |(a, limit, p, burst)| {
            let quota = Quota::with_parts(limit, periods_ns[p], burst)
                .expect("limits, bursts and periods of this range are valid");
            Limit::new(Algorithm::ALL[a], quota)
        })
}

/// Mostly checks of small costs (peeks and costs beyond the burst
/// included), some refunds (of everything, too), forced charges and leases.
pub fn operation() -> impl Strategy<Value = Operation> {
    let cost = || prop_oneof![1 => Just(0u64), 6 => 1u64..4, 1 => 4u64..20];
    prop_oneof![
        8 => cost().prop_map(Operation::Check),
        1 => prop_oneof![cost(), Just(u64::MAX)].prop_map(Operation::Refund),
        1 => (0u64..40).prop_map(Operation::Force),
        2 => cost().prop_map(Operation::Lease),
    ]
}

/// Up to 50 requests whose steps are mostly within `span`, some late (up
/// to `span` back) and some long pauses (up to four spans).
fn trace(span: i64) -> impl Strategy<Value = Vec<Request>> {
    let step = prop_oneof![4 => 0..=span, 1 => -span..0, 1 => 0..=4 * span];
    prop::collection::vec((step, 0..KEYS, operation()), 1..50).prop_map(|v| {
        v.into_iter()
            .map(|(step, key, op)| Request { step, key, op })
            .collect()
    })
}

/// What the core answers to `op` on one key's states at `now_ns`, as a store
/// reports it: the amount charged and the decision (for a refund, the key's
/// numbers after it, for a reset a fresh key's); `None` for a lease the
/// core refuses.
pub fn core(states: &mut [State], limits: &[Limit], op: Operation, now_ns: u64) -> Option<Lease> {
    let charged = |cost, decision: Decision| Lease {
        granted: if decision.allowed { cost } else { 0 },
        decision,
    };
    Some(match op {
        Operation::Check(cost) => charged(cost, decide_all(states, limits, now_ns, cost)),
        Operation::Refund(cost) => {
            refund_all(states, limits, now_ns, cost);
            charged(0, preview_all(states, limits, now_ns, 0))
        }
        Operation::Force(cost) => charged(cost, force_all(states, limits, now_ns, cost)),
        Operation::Lease(max) => return lease_all(states, limits, now_ns, max).ok(),
        Operation::Reset => {
            for (state, limit) in states.iter_mut().zip(limits) {
                *state = State::new(limit.algorithm, &limit.quota);
            }
            charged(0, preview_all(states, limits, now_ns, 0))
        }
    })
}

/// The agreement check: random cases of one or two limits and a trace,
/// each request sent to the store and to the core, answers compared.
pub struct Agreement {
    periods_ns: &'static [u64],
    unit_ns: u64,
    cases: u32,
}

impl Agreement {
    /// Limits with periods from `periods_ns`, and a store whose clock counts
    /// in units of `unit_ns` (1 for nanoseconds, 1000 for microseconds).
    pub fn new(periods_ns: &'static [u64], unit_ns: u64) -> Self {
        Agreement {
            periods_ns,
            unit_ns: unit_ns.max(1),
            cases: 256,
        }
    }

    /// Random cases to run (default 256).
    pub fn cases(mut self, cases: u32) -> Self {
        self.cases = cases;
        self
    }

    /// Runs the cases. `store` is called with the case's number, a key
    /// unique to the case, the policy, the operation and the time in the
    /// store's unit; `resolution` maps the core's decision to what a store
    /// with that clock reports (durations rounded up to its unit). Panics
    /// with the shrunk failing case on the first disagreement.
    pub fn run(
        &self,
        store: impl FnMut(usize, &str, &Policy, Operation, u64) -> Result<Lease, BackendError>,
        resolution: impl Fn(Decision) -> Decision,
    ) {
        let unit = self.unit_ns;
        let case =
            prop::collection::vec(limit(self.periods_ns), 1..3).prop_flat_map(move |limits| {
                let longest = limits
                    .iter()
                    .map(|l| l.quota.period_ns())
                    .max()
                    .unwrap_or(1);
                // Two seconds at most: long enough for every window to turn over.
                let span = (longest / unit).clamp(2, (2_000_000_000 / unit).max(2)) as i64;
                (Just(limits), trace(span))
            });
        // The runner takes a `Fn`: the count and the store change inside.
        let case_no = std::cell::Cell::new(0);
        let store = std::cell::RefCell::new(store);
        let mut runner = TestRunner::new(Config {
            cases: self.cases,
            failure_persistence: None,
            ..Config::default()
        });
        let ran = runner.run(&case, |(limits, requests)| {
            case_no.set(case_no.get() + 1);
            let case_no = case_no.get();
            let policy = Policy::with_limits(limits.clone()).expect("one or two limits");
            let mut states: Vec<Vec<State>> = (0..KEYS)
                .map(|_| {
                    limits
                        .iter()
                        .map(|l| State::new(l.algorithm, &l.quota))
                        .collect()
                })
                .collect();
            let mut now = (T0_NS / unit) as i64;
            for (i, r) in requests.iter().enumerate() {
                now = (now + r.step).max(0);
                let key = format!("c{case_no}-k{}", r.key);
                let core = core(&mut states[r.key], &limits, r.op, now as u64 * unit);
                let answer = (store.borrow_mut())(case_no, &key, &policy, r.op, now as u64);
                match (answer, core) {
                    (Ok(store), Some(core)) => prop_assert_eq!(
                        store,
                        Lease {
                            decision: resolution(core.decision),
                            ..core
                        },
                        "request {} ({:?}) at {}",
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
        });
        if let Err(e) = ran {
            panic!("the store disagrees with the core: {e}");
        }
    }
}
