//! Seed 002's coordination trade: 40 instances share one store, each
//! client limited to 100 a minute. One store operation per request, or
//! batched reservations: an instance leases `n` units of a client in one
//! operation and spends them locally. How much store load does a batch
//! size save, and how far past the limit does it let a client go?
//!
//! Each instance keeps, per client, the units it leased, when, and a
//! denial until the `retry_after` of a lease that granted nothing (so a
//! client over its limit costs no store operation until then). Units held
//! longer than the lease TTL are refunded by the client's next request on
//! that instance. Two routings: *sticky* (a client always reaches the same
//! instance, as behind a load balancer hashing the client) and *spread*
//! (each request reaches a random instance).

use tollgate_core::{Algorithm, Quota, RetryAfter, State};

use super::Scenario;
use crate::charts::{Chart, Panel, Reference, Series};
use crate::metrics::{worst_span, Charge};
use crate::report::{Check, Details, ScenarioReport};
use crate::rng::PyRandom;
use crate::table::Table;

/// Instances sharing the store.
pub const INSTANCES: usize = 40;
/// Clients, each with its own key.
pub const CLIENTS: usize = 20;
/// Demand of most clients, requests per minute (within their limit).
pub const DEMAND_PER_MIN: f64 = 60.0;
/// Clients sending more than their limit: the first this many.
pub const ABUSERS: usize = 4;
/// Their demand, requests per minute (three times the limit).
pub const ABUSER_PER_MIN: f64 = 300.0;
/// Simulated time.
pub const DURATION_S: u64 = 600;
/// Batch sizes compared.
pub const BATCHES: [u64; 4] = [1, 5, 10, 50];
/// The store's algorithms: a bucket leases units, the fixed window a slice
/// of its current window.
pub const ALGORITHMS: [Algorithm; 2] = [Algorithm::TokenBucket, Algorithm::FixedWindow];
/// How long an instance spends from a lease before refunding its rest.
pub const LEASE_TTL_S: u64 = 30;
/// The fleet's request rate the seed quotes, to scale store load to it.
const SEED_RATE: f64 = 1_000_000.0;

const S: u64 = 1_000_000_000;
const MIN: u64 = 60 * S;

/// How a client's requests reach the instances.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Routing {
    /// Every request of a client reaches the same instance.
    Sticky,
    /// Each request reaches a random instance.
    Spread,
}

impl Routing {
    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Routing::Sticky => "sticky",
            Routing::Spread => "spread",
        }
    }
}

/// One run: a routing and a batch size (`None`: one store decision per
/// request, no lease).
#[derive(Clone, Debug, serde::Serialize)]
pub struct BatchRow {
    /// The store's algorithm.
    pub algorithm: &'static str,
    /// How requests were routed.
    pub routing: Routing,
    /// Units per lease; `None` for a store decision per request.
    pub batch: Option<u64>,
    /// Requests sent.
    pub requests: u64,
    /// Requests admitted.
    pub admitted: u64,
    /// Store operations (decisions, leases, refunds).
    pub store_ops: u64,
    /// Store operations per second at the seed's 1,000,000 requests/s.
    pub ops_per_s_at_seed_rate: f64,
    /// The most any client was admitted in any 60 s.
    pub worst_60s: u64,
    /// `worst_60s` minus the same without leases: what batching added.
    pub overshoot: i64,
    /// `INSTANCES * batch`.
    pub bound: u64,
}

/// The rows of the scenario, for `report.md` and `report.json`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BatchingReport {
    /// Per-request runs first, then each batch size, per routing.
    pub rows: Vec<BatchRow>,
}

impl BatchingReport {
    /// The table shown for the scenario.
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new([
            "algorithm",
            "routing",
            "store ops",
            "admitted",
            "store ops/s at 1M req/s",
            "worst client in 60 s",
            "overshoot",
            "bound (40 x n)",
        ]);
        for r in &self.rows {
            t.row([
                r.algorithm.to_string(),
                r.routing.name().to_string(),
                r.batch
                    .map_or("per request".into(), |n| format!("lease {n}")),
                format!("{} of {}", r.admitted, r.requests),
                format!("{:.0}", r.ops_per_s_at_seed_rate),
                r.worst_60s.to_string(),
                format!("{:+}", r.overshoot),
                r.batch.map_or("-".into(), |_| r.bound.to_string()),
            ]);
        }
        vec![t]
    }
}

/// One request: when, whose, on which instance.
#[derive(Clone, Copy)]
struct Request {
    at: u64,
    client: usize,
    instance: usize,
}

/// Poisson arrivals per client, merged by time.
fn traffic(routing: Routing) -> Vec<Request> {
    let mut rng = PyRandom::new(2);
    let mut out = Vec::new();
    for client in 0..CLIENTS {
        let per_min = if client < ABUSERS {
            ABUSER_PER_MIN
        } else {
            DEMAND_PER_MIN
        };
        let rate_per_ns = per_min / MIN as f64;
        let mut t = 0.0;
        loop {
            t += rng.expovariate(rate_per_ns);
            if t >= (DURATION_S * S) as f64 {
                break;
            }
            let instance = match routing {
                Routing::Sticky => client % INSTANCES,
                Routing::Spread => (rng.next_u32() as usize) % INSTANCES,
            };
            out.push(Request {
                at: t as u64,
                client,
                instance,
            });
        }
    }
    out.sort_by_key(|r| (r.at, r.client));
    out
}

/// What one instance holds for one client.
#[derive(Clone, Copy, Default)]
struct Held {
    units: u64,
    leased_at: u64,
    denied_until: u64,
}

/// Runs `trace` with leases of `batch` (or a decision per request) and
/// returns (admissions per client, store operations).
fn run(
    trace: &[Request],
    algorithm: Algorithm,
    quota: &Quota,
    batch: Option<u64>,
) -> (Vec<Vec<Charge>>, u64) {
    let mut store: Vec<State> = (0..CLIENTS).map(|_| State::new(algorithm, quota)).collect();
    let mut held = vec![Held::default(); INSTANCES * CLIENTS];
    let mut admitted = vec![Vec::new(); CLIENTS];
    let mut ops = 0;
    for r in trace {
        let state = &mut store[r.client];
        let allowed = match batch {
            None => {
                ops += 1;
                state.decide(quota, r.at, 1).allowed
            }
            Some(n) => {
                let h = &mut held[r.instance * CLIENTS + r.client];
                spend(h, state, quota, r.at, n, &mut ops)
            }
        };
        if allowed {
            admitted[r.client].push(Charge { at: r.at, cost: 1 });
        }
    }
    (admitted, ops)
}

/// One request on an instance holding `h` for the client: spends a leased
/// unit, leasing `n` more when none is left.
fn spend(h: &mut Held, state: &mut State, quota: &Quota, now: u64, n: u64, ops: &mut u64) -> bool {
    if now < h.denied_until {
        return false;
    }
    if h.units > 0 && now - h.leased_at >= LEASE_TTL_S * S {
        *ops += 1;
        state.refund(quota, now, std::mem::take(&mut h.units));
    }
    if h.units == 0 {
        *ops += 1;
        let lease = state
            .lease(quota, now, n)
            .expect("the scenario's algorithms lease");
        if lease.granted == 0 {
            if let RetryAfter::After(wait) = lease.decision.retry_after {
                h.denied_until = now + wait;
            }
            return false;
        }
        h.units = lease.granted;
        h.leased_at = now;
    }
    h.units -= 1;
    true
}

/// The most any client was admitted in any 60 s.
fn worst(admitted: &[Vec<Charge>]) -> u64 {
    admitted
        .iter()
        .map(|a| worst_span(a, MIN))
        .max()
        .unwrap_or(0)
}

/// Runs the scenario.
pub fn run_scenario() -> Scenario {
    let quota = Quota::per_minute(100).expect("valid");
    let mut rows = Vec::new();
    for (algorithm, routing) in ALGORITHMS
        .into_iter()
        .flat_map(|a| [(a, Routing::Sticky), (a, Routing::Spread)])
    {
        let trace = traffic(routing);
        let requests = trace.len() as u64;
        let (exact, exact_ops) = run(&trace, algorithm, &quota, None);
        let exact_worst = worst(&exact);
        let row = |batch: Option<u64>, admitted: &[Vec<Charge>], ops: u64| {
            let worst_60s = worst(admitted);
            BatchRow {
                algorithm: algorithm.name(),
                routing,
                batch,
                requests,
                admitted: admitted.iter().map(|a| a.len() as u64).sum(),
                store_ops: ops,
                ops_per_s_at_seed_rate: ops as f64 / requests as f64 * SEED_RATE,
                worst_60s,
                overshoot: worst_60s as i64 - exact_worst as i64,
                bound: INSTANCES as u64 * batch.unwrap_or(0),
            }
        };
        rows.push(row(None, &exact, exact_ops));
        for n in BATCHES {
            let (admitted, ops) = run(&trace, algorithm, &quota, Some(n));
            rows.push(row(Some(n), &admitted, ops));
        }
    }
    let find = |algorithm: Algorithm, routing: Routing, batch: Option<u64>| {
        rows.iter()
            .find(|r| r.algorithm == algorithm.name() && r.routing == routing && r.batch == batch)
            .expect("every run has a row")
            .clone()
    };
    let bucket = Algorithm::TokenBucket;
    let direct = find(bucket, Routing::Sticky, None);
    let sticky10 = find(bucket, Routing::Sticky, Some(10));
    let overshoot10 = rows
        .iter()
        .filter(|r| r.batch == Some(10))
        .map(|r| r.overshoot)
        .max()
        .unwrap_or(0);
    let worst_overshoot = rows.iter().map(|r| r.overshoot).max().unwrap_or(0);
    let checks = vec![
        Check::judged(
            "store ops/s, one per request, at 1M requests/s",
            "1,000,000".into(),
            format!("{:.0}", direct.ops_per_s_at_seed_rate),
            (direct.ops_per_s_at_seed_rate - SEED_RATE).abs() < 1.0,
            "",
        ),
        Check::judged(
            "store ops/s, batches of 10, at 1M requests/s (token bucket, sticky routing)",
            "100,000".into(),
            format!("{:.0}", sticky10.ops_per_s_at_seed_rate),
            sticky10.ops_per_s_at_seed_rate <= 0.2 * SEED_RATE,
            "the clients over their limit: once their bucket is empty, each lease is granted \
             the one unit refilled since the last, so every request they are admitted costs a \
             store operation; the clients within their limit cost one per 10",
        ),
        Check::at_most(
            "overshoot with batches of 10 (any algorithm and routing)",
            INSTANCES as u64 * 10,
            overshoot10.max(0) as u64,
            "",
        ),
    ];
    let notes = vec![
        format!(
            "{CLIENTS} clients: {ABUSERS} send {ABUSER_PER_MIN:.0} a minute, the others \
             {DEMAND_PER_MIN:.0} (Poisson), for {DURATION_S} s, against a token bucket of 100 a minute (burst 100); leases are \
             refunded after {LEASE_TTL_S} s. Store load is scaled to the seed's fleet of \
             1,000,000 requests a second by the operations per request measured here."
        ),
        format!(
            "Spread routing gives each instance a client's requests only every \
             {:.0} s on average, so a lease outlives its TTL and is refunded: batching pays \
             only for keys that are hot on each instance. Sticky routing (or a per-key hot \
             threshold, as tollgate's `Batched` uses) is what makes the seed's tenfold cut real.",
            MIN as f64 / S as f64 / (DEMAND_PER_MIN / INSTANCES as f64)
        ),
        format!(
            "Overshoot: the worst 60 s of any client minus the same without leases; at most \
             {worst_overshoot:+} here, against a bound of instances x n (units leased in one \
             window and spent in the next)."
        ),
    ];
    let lines = |f: fn(&BatchRow) -> f64| -> Vec<Series> {
        ALGORITHMS
            .into_iter()
            .flat_map(|a| [(a, Routing::Sticky), (a, Routing::Spread)])
            .map(|(a, routing)| {
                let points: Vec<(f64, f64)> = BATCHES
                    .iter()
                    .map(|&n| (n as f64, f(&find(a, routing, Some(n)))))
                    .collect();
                Series::new(format!("{}, {}", a.name(), routing.name()), points)
            })
            .collect()
    };
    let chart = Chart {
        stem: "batching".into(),
        panel_height: 320,
        panels: vec![
            Panel::Lines {
                title: "batching: overshoot past the per-request worst 60 s".into(),
                x_label: "batch size (units per lease)".into(),
                y_label: "extra admitted in the worst 60 s".into(),
                log_y: false,
                y_max: None,
                series: lines(|r| r.overshoot as f64),
                reference: Some(Reference::new(
                    (INSTANCES as u64 * 10) as f64,
                    "bound at n = 10: 40 x 10",
                )),
            },
            Panel::Lines {
                title: "batching: store operations at 1,000,000 requests/s".into(),
                x_label: "batch size (units per lease)".into(),
                y_label: "store ops/s".into(),
                log_y: true,
                y_max: None,
                series: lines(|r| r.ops_per_s_at_seed_rate),
                reference: Some(Reference::new(SEED_RATE, "one op per request")),
            },
        ],
    };
    Scenario {
        report: ScenarioReport {
            name: "batching",
            title: "batched reservations: store load against overshoot".into(),
            source: "seed 002",
            traffic: format!(
                "{INSTANCES} instances, {CLIENTS} clients ({ABUSERS} at {ABUSER_PER_MIN:.0}/min, \
                 the others at {DEMAND_PER_MIN:.0}/min), limit 100/min (token bucket with burst 100, and fixed window), \
                 {DURATION_S} s; one store op per \
                 request versus leases of {BATCHES:?}, sticky and spread routing."
            ),
            requests: direct.requests,
            rows: Vec::new(),
            details: Details::Batching(BatchingReport { rows }),
            checks,
            notes,
            charts: vec!["batching".into()],
        },
        charts: vec![chart],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_of_one_decides_like_the_store() {
        let quota = Quota::per_minute(100).unwrap();
        let trace = traffic(Routing::Spread);
        for algorithm in ALGORITHMS {
            let (exact, _) = run(&trace, algorithm, &quota, None);
            let (one, _) = run(&trace, algorithm, &quota, Some(1));
            assert_eq!(exact, one);
        }
    }

    #[test]
    fn leases_stay_within_the_bound_and_cut_store_load_when_sticky() {
        let scenario = run_scenario();
        let Details::Batching(report) = scenario.report.details else {
            panic!("batching details");
        };
        for r in &report.rows {
            if let Some(n) = r.batch {
                assert!(r.overshoot <= (INSTANCES as u64 * n) as i64, "{r:?}");
            }
        }
        let ops = |batch| {
            report
                .rows
                .iter()
                .find(|r| {
                    r.algorithm == "token_bucket"
                        && r.routing == Routing::Sticky
                        && r.batch == batch
                })
                .unwrap()
                .store_ops
        };
        assert!(
            ops(Some(10)) * 2 < ops(None),
            "{} vs {}",
            ops(Some(10)),
            ops(None)
        );
    }
}
