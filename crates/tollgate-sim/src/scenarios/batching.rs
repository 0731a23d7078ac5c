//! Seed 002's coordination trade: 40 instances share one store, each
//! client limited to 100 a minute. One store operation per request, or
//! batched reservations: an instance leases `n` units of a client in one
//! operation and spends them locally. How much store load does a batch
//! size save, and how far past the limit does it let a client go?
//!
//! Each instance runs the library's own `Batched` layer (the one `tollgate
//! serve` puts in front of its store) over one shared store, on a
//! simulated clock: the hot-key threshold, the lease TTL (with the
//! server's sweep of expired leases every TTL), the waits for a lease in
//! flight and the denials kept until a refused lease's `retry_after` are
//! the real ones. Two settings: the defaults that ship (keys hot from 20
//! requests a second on an instance, leases kept 1 s), and the same tuned
//! to this traffic (every key leased, leases kept 30 s). Two routings:
//! *sticky* (a client always reaches the same instance, as behind a load
//! balancer hashing the client) and *spread* (each request reaches a random
//! instance).

use std::sync::Arc;
use std::time::Duration;

use tollgate::{
    Backend, BackendExt, BatchConfig, Batched, FakeClock, Limit, MemoryBackend, Policy,
};
use tollgate_core::{Algorithm, Quota};

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
/// The tuned lease TTL: long enough for a sticky client within its limit
/// (one request a second) to spend a lease of 10 before it expires.
pub const TUNED_LEASE_TTL_S: u64 = 30;
/// The fleet's request rate the seed quotes, to scale store load to it.
const SEED_RATE: f64 = 1_000_000.0;
/// The limit, per client and minute (the token bucket's burst too).
const LIMIT: u64 = 100;

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

/// The `Batched` settings besides the batch size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Tuning {
    /// The defaults that ship: hot from 20 requests a second, leases kept 1 s.
    Shipped,
    /// Every key leased, leases kept [`TUNED_LEASE_TTL_S`].
    Tuned,
}

impl Tuning {
    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Tuning::Shipped => "shipped",
            Tuning::Tuned => "tuned",
        }
    }

    /// The layer's settings with leases of `batch`.
    pub fn config(self, batch: u64) -> BatchConfig {
        let shipped = BatchConfig::default().batch(batch);
        match self {
            Tuning::Shipped => shipped,
            Tuning::Tuned => shipped
                .hot_rate(0)
                .lease_ttl(Duration::from_secs(TUNED_LEASE_TTL_S)),
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
    /// The layer's settings; `None` with `batch`.
    pub tuning: Option<Tuning>,
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
    /// The most any client was admitted in one of the limit's windows: a
    /// minute of the fixed window's, any 60 s for the token bucket.
    pub worst_window: u64,
    /// `worst_window` minus the most the policy itself admits there (100
    /// for the fixed window, burst + a minute's refill = 200 for the
    /// bucket): what the leases added, units leased in one window and
    /// spent in the next included.
    pub overshoot: i64,
    /// The policy's own bound plus `INSTANCES * batch`.
    pub bound: u64,
}

/// The rows of the scenario, for `report.md` and `report.json`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BatchingReport {
    /// Per-request runs first, then each setting and batch size, per
    /// algorithm and routing.
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
            "worst window",
            "overshoot",
            "bound (own + 40 x n)",
        ]);
        for r in &self.rows {
            t.row([
                r.algorithm.to_string(),
                r.routing.name().to_string(),
                match (r.tuning, r.batch) {
                    (Some(tuning), Some(n)) => format!("lease {n} ({})", tuning.name()),
                    _ => "per request".into(),
                },
                format!("{} of {}", r.admitted, r.requests),
                format!("{:.0}", r.ops_per_s_at_seed_rate),
                r.worst_window.to_string(),
                format!("{:+}", r.overshoot),
                r.bound.to_string(),
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

/// Runs `trace` through one `Batched` layer per instance over one shared
/// store (or straight to the store without `config`) and returns
/// (admissions per client, store operations).
fn run(trace: &[Request], policy: &Policy, config: Option<BatchConfig>) -> (Vec<Vec<Charge>>, u64) {
    let clock = FakeClock::new();
    let store = Arc::new(MemoryBackend::with_clock(clock.clone()));
    let layers: Vec<_> = config
        .map(|c| {
            (0..INSTANCES)
                .map(|_| Batched::with_clock(Arc::clone(&store), c, clock.clone()))
                .collect()
        })
        .unwrap_or_default();
    // Only leasable algorithms are batched here (see `ALGORITHMS`).
    let prepared: Vec<_> = layers
        .iter()
        .map(|l| l.prepare(policy).expect("a leasable policy"))
        .collect();
    let direct = store.prepare(policy).expect("memory takes every policy");
    let keys: Vec<String> = (0..CLIENTS).map(|c| format!("client-{c}")).collect();
    // Every call completes at once (the store is in memory): a
    // single-threaded runtime only drives them.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime without I/O or timers always builds");
    // As `tollgate serve`, the expired leases are swept every TTL.
    let sweep_every = config.map_or(u64::MAX, |c| c.ttl().as_nanos() as u64);
    let mut next_sweep = sweep_every;
    let mut admitted = vec![Vec::new(); CLIENTS];
    for r in trace {
        while r.at >= next_sweep {
            clock.set(next_sweep);
            for layer in &layers {
                runtime.block_on(layer.refund_expired());
            }
            next_sweep += sweep_every;
        }
        clock.set(r.at);
        let key = &keys[r.client];
        let decision = runtime.block_on(async {
            match layers.get(r.instance) {
                Some(layer) => layer.check(key, &prepared[r.instance], 1).await,
                None => store.check(key, &direct, 1).await,
            }
        });
        if decision
            .expect("the memory store decides every request")
            .allowed
        {
            admitted[r.client].push(Charge { at: r.at, cost: 1 });
        }
    }
    let ops = if layers.is_empty() {
        trace.len() as u64
    } else {
        layers.iter().map(|l| l.stats().store_calls).sum()
    };
    (admitted, ops)
}

/// The most any client was admitted in one of `algorithm`'s windows, and
/// the most the policy itself admits there.
fn worst(algorithm: Algorithm, admitted: &[Vec<Charge>]) -> (u64, u64) {
    let per_client = |a: &Vec<Charge>| match algorithm {
        // The store's own minutes: units leased late in one and spent in
        // the next count in the next.
        Algorithm::FixedWindow => {
            let mut minutes = vec![0u64; (DURATION_S * S / MIN + 1) as usize];
            for c in a {
                minutes[(c.at / MIN) as usize] += c.cost;
            }
            minutes.into_iter().max().unwrap_or(0)
        }
        _ => worst_span(a, MIN),
    };
    let own = match algorithm {
        Algorithm::FixedWindow => LIMIT,
        _ => 2 * LIMIT,
    };
    (admitted.iter().map(per_client).max().unwrap_or(0), own)
}

/// The settings and batch sizes of a run: `None` for one store decision per
/// request.
fn settings() -> impl Iterator<Item = Option<(Tuning, u64)>> {
    std::iter::once(None).chain(
        [Tuning::Shipped, Tuning::Tuned]
            .into_iter()
            .flat_map(|t| BATCHES.into_iter().map(move |n| Some((t, n)))),
    )
}

/// Every (algorithm, routing) pair, in the table's order.
fn lanes() -> impl Iterator<Item = (Algorithm, Routing)> {
    ALGORITHMS
        .into_iter()
        .flat_map(|a| [(a, Routing::Sticky), (a, Routing::Spread)])
}

/// Runs the scenario.
pub fn run_scenario() -> Scenario {
    let quota = Quota::per_minute(LIMIT).expect("valid");
    let mut rows = Vec::new();
    for (algorithm, routing) in lanes() {
        let trace = traffic(routing);
        let requests = trace.len() as u64;
        let policy = Policy::new(Limit::new(algorithm, quota));
        for setting in settings() {
            let (admitted, ops) = run(&trace, &policy, setting.map(|(t, n)| t.config(n)));
            let (worst_window, own) = worst(algorithm, &admitted);
            let batch = setting.map(|(_, n)| n);
            rows.push(BatchRow {
                algorithm: algorithm.name(),
                routing,
                tuning: setting.map(|(t, _)| t),
                batch,
                requests,
                admitted: admitted.iter().map(|a| a.len() as u64).sum(),
                store_ops: ops,
                ops_per_s_at_seed_rate: ops as f64 / requests as f64 * SEED_RATE,
                worst_window,
                overshoot: worst_window as i64 - own as i64,
                bound: own + INSTANCES as u64 * batch.unwrap_or(0),
            });
        }
    }
    let find = |algorithm: Algorithm, routing: Routing, setting: Option<(Tuning, u64)>| {
        rows.iter()
            .find(|r| {
                r.algorithm == algorithm.name()
                    && r.routing == routing
                    && r.tuning == setting.map(|(t, _)| t)
                    && r.batch == setting.map(|(_, n)| n)
            })
            .expect("every run has a row")
            .clone()
    };
    let bucket = Algorithm::TokenBucket;
    let window = Algorithm::FixedWindow;
    let direct = find(bucket, Routing::Sticky, None);
    let shipped10 = find(bucket, Routing::Sticky, Some((Tuning::Shipped, 10)));
    let bucket10 = find(bucket, Routing::Sticky, Some((Tuning::Tuned, 10)));
    let window10 = find(window, Routing::Sticky, Some((Tuning::Tuned, 10)));
    // The most a bucket's leases can save here: a client within its limit
    // costs a lease per 10 requests at best; a client over it, a lease per
    // admitted request, since its empty bucket refills one unit at a time
    // and the instance leases again as soon as one is there.
    let (abuser_requests, abuser_admitted) = abusers(&traffic(Routing::Sticky), &quota);
    let best_ops = (direct.requests - abuser_requests) as f64 / 10.0 + abuser_admitted as f64;
    let best_cut = direct.requests as f64 / best_ops;
    let cut = |r: &BatchRow| r.requests as f64 / r.store_ops as f64;
    let worst_overshoot = rows.iter().map(|r| r.overshoot).max().unwrap_or(0);
    let over_bound = rows
        .iter()
        .filter(|r| r.overshoot > (INSTANCES as u64 * r.batch.unwrap_or(0)) as i64)
        .count();
    let checks = vec![
        Check::judged(
            "store ops/s, one per request, at 1M requests/s",
            "1,000,000".into(),
            format!("{:.0}", direct.ops_per_s_at_seed_rate),
            (direct.ops_per_s_at_seed_rate - SEED_RATE).abs() < 1.0,
            "",
        ),
        Check::judged(
            "store ops/s, batches of 10, shipped defaults (token bucket, sticky routing)",
            "100,000".into(),
            format!("{:.0}", shipped10.ops_per_s_at_seed_rate),
            shipped10.ops_per_s_at_seed_rate <= 0.1 * SEED_RATE,
            "no key reaches the shipped hot threshold (20 requests a second on one instance): \
             clients at 60 to 300 a minute are never leased, each request is a store operation",
        ),
        Check::judged(
            "fewer store calls, batches of 10, tuned (token bucket, sticky routing)",
            "10x".into(),
            format!("{:.1}x (at most {best_cut:.1}x here)", cut(&bucket10)),
            cut(&bucket10) >= 10.0,
            "a bucket leases only what it holds: a client over its limit empties it, and each \
             lease then gets the one unit refilled since the last, so every request it is \
             admitted costs a store operation; the clients within their limit cost one per 10",
        ),
        Check::judged(
            "fewer store calls, batches of 10, tuned (fixed window, sticky routing)",
            "10x".into(),
            format!("{:.1}x", cut(&window10)),
            cut(&window10) >= 10.0,
            "",
        ),
        Check::at_most(
            "runs whose overshoot passed instances x n",
            0,
            over_bound as u64,
            "",
        ),
    ];
    let notes = vec![
        format!(
            "{CLIENTS} clients: {ABUSERS} send {ABUSER_PER_MIN:.0} a minute, the others \
             {DEMAND_PER_MIN:.0} (Poisson), for {DURATION_S} s, against 100 a minute (token \
             bucket with burst 100, and fixed window). Each of the {INSTANCES} instances runs \
             tollgate's `Batched` over one shared store; *shipped*: keys hot from 20 requests a \
             second, leases kept 1 s; *tuned*: every key leased, leases kept \
             {TUNED_LEASE_TTL_S} s. Store load is scaled to the seed's fleet of 1,000,000 \
             requests a second by the operations per request measured here."
        ),
        format!(
            "The seed's tenfold cut at batches of 10 assumes every lease is spent whole. With \
             the shipped defaults, a key is leased only when one instance sees 20 requests a \
             second, which no client here comes near: batching saves nothing and costs \
             nothing. Tuned, the token bucket cuts store calls {:.1}x and can cut at most \
             {best_cut:.1}x on this traffic: the 4 clients over their limit are {:.0} % of \
             the requests, and an empty bucket leases one unit at a time. The fixed window \
             reaches {:.1}x: a lease it refuses keeps the client away from the store until \
             the window ends.",
            cut(&bucket10),
            abuser_requests as f64 / direct.requests as f64 * 100.0,
            cut(&window10),
        ),
        format!(
            "Overshoot: the most a client was admitted in one of the limit's windows (the \
             fixed window's minutes; any 60 s for the bucket) minus what the policy itself \
             admits there (100; 200 for the bucket, its burst and a minute's refill). Units \
             leased late in one window and spent in the next count in the next. At most \
             {worst_overshoot:+} here, against a bound of instances x n."
        ),
    ];
    let lines = |f: fn(&BatchRow) -> f64| -> Vec<Series> {
        lanes()
            .flat_map(|(a, routing)| [Tuning::Shipped, Tuning::Tuned].map(|t| (a, routing, t)))
            .map(|(a, routing, tuning)| {
                let points: Vec<(f64, f64)> = BATCHES
                    .iter()
                    .map(|&n| (n as f64, f(&find(a, routing, Some((tuning, n))))))
                    .collect();
                let name = format!("{}, {}, {}", a.name(), routing.name(), tuning.name());
                Series::new(name, points)
            })
            .collect()
    };
    let chart = Chart {
        stem: "batching".into(),
        panel_height: 320,
        panels: vec![
            Panel::Lines {
                title: "batching: overshoot past the policy's own bound in its worst window".into(),
                x_label: "batch size (units per lease)".into(),
                y_label: "extra admitted in the worst window".into(),
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
                 the others at {DEMAND_PER_MIN:.0}/min), limit 100/min (token bucket with burst \
                 100, and fixed window), {DURATION_S} s; one store op per request versus \
                 tollgate's `Batched` with leases of {BATCHES:?}, shipped and tuned, sticky and \
                 spread routing."
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

/// The requests of the clients over their limit, and how many of them a
/// token bucket decided per request admits.
fn abusers(trace: &[Request], quota: &Quota) -> (u64, u64) {
    let policy = Policy::new(Limit::new(Algorithm::TokenBucket, *quota));
    let (admitted, _) = run(trace, &policy, None);
    let requests = trace.iter().filter(|r| r.client < ABUSERS).count() as u64;
    let admitted = admitted[..ABUSERS].iter().map(|a| a.len() as u64).sum();
    (requests, admitted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_of_one_decides_like_the_store() {
        let quota = Quota::per_minute(LIMIT).unwrap();
        let trace = traffic(Routing::Spread);
        for algorithm in ALGORITHMS {
            let policy = Policy::new(Limit::new(algorithm, quota));
            let (exact, _) = run(&trace, &policy, None);
            let (one, _) = run(&trace, &policy, Some(Tuning::Tuned.config(1)));
            assert_eq!(exact, one);
        }
    }

    #[test]
    fn shipped_defaults_lease_nothing_here_and_tuned_leases_stay_within_the_bound() {
        let scenario = run_scenario();
        let Details::Batching(report) = scenario.report.details else {
            panic!("batching details");
        };
        for r in &report.rows {
            let n = r.batch.unwrap_or(0);
            assert!(r.overshoot <= (INSTANCES as u64 * n) as i64, "{r:?}");
            if r.tuning == Some(Tuning::Shipped) {
                assert_eq!(r.store_ops, r.requests, "{r:?}");
            }
        }
        let ops = |algorithm: &str, batch| {
            report
                .rows
                .iter()
                .find(|r| {
                    r.algorithm == algorithm
                        && r.routing == Routing::Sticky
                        && r.batch == batch
                        && r.tuning == batch.map(|_| Tuning::Tuned)
                })
                .unwrap()
                .store_ops
        };
        let direct = ops("token_bucket", None);
        assert!(ops("token_bucket", Some(10)) * 2 < direct);
        assert!(ops("fixed_window", Some(10)) * 10 <= direct);
    }
}
