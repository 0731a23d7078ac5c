//! The retry storm: many clients against one limited server whose capacity
//! dips, retrying four ways: at once (the ten-a-second loop), after
//! `Retry-After`, with exponential backoff and full jitter, and shaped the
//! way tollgate-http's client layer does it (a local GCRA at the announced
//! limit, pauses on `Retry-After`, backoff with jitter, a retry budget).
//!
//! Time moves in 10 ms ticks. Every decision, the server's per-client limit,
//! the client's shaping and its retry budget, is made by `tollgate-core`.

use serde::Serialize;
use tollgate_core::{Algorithm, Quota, RetryAfter, State};

use super::Scenario;
use crate::charts::{Chart, Panel, Reference, Series};
use crate::report::{Check, Details, ScenarioReport};
use crate::rng::PyRandom;
use crate::table::Table;

const MS: u64 = 1_000_000;
const TICK: u64 = 10 * MS;
const TICKS_PER_S: u64 = 100;
const SECONDS: u64 = 90;
const CLIENTS: usize = 100;
/// Each client wants one request every 1.2 s: 50 a minute, half its limit.
const EVERY: u64 = 1_200 * MS;
/// The server's capacity, requests a second, outside and during the dip.
const CAPACITY: u64 = 120;
const DIP_CAPACITY: u64 = 30;
const DIP: std::ops::Range<u64> = 30..45;
/// Attempts per request before a backing-off client gives up.
const MAX_ATTEMPTS: u32 = 6;
const BACKOFF_BASE: u64 = 100 * MS;
const BACKOFF_CAP: u64 = 10_000 * MS;
/// A 503 asks for a retry after 1 s.
const OVERLOAD_RETRY: u64 = 1_000 * MS;

/// How a client retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Again after 100 ms, forever.
    Loop,
    /// After the `Retry-After` the server sent, forever.
    RetryAfter,
    /// Full-jitter exponential backoff, at most six attempts.
    Backoff,
    /// Shaped at the announced limit, pauses on `Retry-After`, backoff with
    /// jitter, at most six attempts, retries within a 10% budget.
    Shaped,
}

impl Strategy {
    const ALL: [Strategy; 4] = [
        Strategy::Loop,
        Strategy::RetryAfter,
        Strategy::Backoff,
        Strategy::Shaped,
    ];

    fn label(self) -> &'static str {
        match self {
            Strategy::Loop => "retry at once (10/s loop)",
            Strategy::RetryAfter => "honour Retry-After",
            Strategy::Backoff => "backoff + full jitter",
            Strategy::Shaped => "tollgate client layer",
        }
    }
}

/// One strategy's results.
#[derive(Clone, Debug, Serialize)]
pub struct StormRow {
    /// The strategy.
    pub strategy: Strategy,
    /// Requests the clients wanted to make.
    pub requests: u64,
    /// Attempts that reached the server.
    pub attempts: u64,
    /// Mean attempts a second at the server.
    pub load_mean: f64,
    /// Most attempts in one second.
    pub load_peak: u64,
    /// Share of attempts refused (429 or 503), percent.
    pub refused_percent: f64,
    /// Requests served, a second, over the run.
    pub goodput: f64,
    /// Requests the clients gave up on.
    pub given_up: u64,
    /// Seconds after the capacity came back until a second with no backlog
    /// and at most 5% refused; `None` if not within the run.
    pub recovery_s: Option<u64>,
    /// Attempts per second.
    pub load: Vec<u64>,
    /// Requests served per second.
    pub served: Vec<u64>,
}

/// The scenario's results.
#[derive(Clone, Debug, Serialize)]
pub struct StormReport {
    /// One row per strategy.
    pub rows: Vec<StormRow>,
}

impl StormReport {
    /// The table of `report.md` and the terminal.
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new([
            "clients",
            "server load mean / peak (req/s)",
            "refused",
            "goodput (req/s)",
            "given up",
            "recovery after the dip",
        ]);
        for r in &self.rows {
            t.row([
                r.strategy.label().to_string(),
                format!("{:.0} / {}", r.load_mean, r.load_peak),
                format!("{:.1}%", r.refused_percent),
                format!("{:.1}", r.goodput),
                format!("{} of {}", r.given_up, r.requests),
                r.recovery_s
                    .map_or("not within the run".into(), |s| format!("{s} s")),
            ]);
        }
        vec![t]
    }
}

/// One client's state.
struct Client {
    /// Requests waiting, the head one being tried.
    backlog: u64,
    next_arrival: u64,
    /// When the head request may be tried (ns).
    next_try: u64,
    /// Attempts made for the head request.
    tries: u32,
    /// The server's per-client state.
    server: State,
    /// The client's own shaping (GCRA) and retry budget (token bucket).
    shaper: State,
    budget: State,
}

/// The server's per-client limit, which the shaped client also uses
/// (learned from `RateLimit-Policy`).
fn per_client() -> Quota {
    Quota::per_minute(100)
        .and_then(|q| q.with_burst(10))
        .expect("valid")
}

/// The retry budget: a retry costs 10 units, a request deposits 1 (10%),
/// at most 3 retries banked, one regained every 10 s.
fn budget() -> Quota {
    Quota::with_parts(1, 1_000 * MS, 30).expect("valid")
}

/// Simulates one strategy.
fn simulate(strategy: Strategy) -> StormRow {
    let mut rng = PyRandom::new(15);
    let quota = per_client();
    let budget_quota = budget();
    let mut clients: Vec<Client> = (0..CLIENTS)
        .map(|_| Client {
            backlog: 0,
            next_arrival: (rng.random() * EVERY as f64) as u64,
            next_try: 0,
            tries: 0,
            server: State::new(Algorithm::Gcra, &quota),
            shaper: State::new(Algorithm::Gcra, &quota),
            budget: State::new(Algorithm::TokenBucket, &budget_quota),
        })
        .collect();
    let seconds = SECONDS as usize;
    let (mut load, mut served, mut refused) = (
        vec![0u64; seconds],
        vec![0u64; seconds],
        vec![0u64; seconds],
    );
    let mut backlog_at = vec![0u64; seconds];
    // Capacity in hundredths of a request: +N per tick, at most N/10 banked.
    let mut allowance = 0u64;
    let (mut requests, mut given_up) = (0u64, 0u64);
    for tick in 0..SECONDS * TICKS_PER_S {
        let now = tick * TICK;
        let second = (tick / TICKS_PER_S) as usize;
        let capacity = if DIP.contains(&(second as u64)) {
            DIP_CAPACITY
        } else {
            CAPACITY
        };
        allowance = (allowance + capacity).min(capacity * 10);
        let start = tick as usize % CLIENTS;
        for i in (start..CLIENTS).chain(0..start) {
            let c = &mut clients[i];
            while c.next_arrival <= now {
                c.backlog += 1;
                requests += 1;
                c.next_arrival += EVERY;
                if strategy == Strategy::Shaped {
                    // Each request deposits its share of a retry.
                    c.budget.refund(&budget_quota, now, 1);
                }
            }
            if c.backlog == 0 || c.next_try > now {
                continue;
            }
            if strategy == Strategy::Shaped {
                let d = c.shaper.decide(&quota, now, 1);
                if let RetryAfter::After(wait) = d.retry_after {
                    c.next_try = now + wait;
                    continue;
                }
            }
            load[second] += 1;
            c.tries += 1;
            let limited = c.server.decide(&quota, now, 1);
            let retry_after = match limited.retry_after {
                RetryAfter::Now if allowance >= 100 => {
                    allowance -= 100;
                    served[second] += 1;
                    c.backlog -= 1;
                    c.tries = 0;
                    continue;
                }
                // Over capacity: the charge for the per-client limit stays,
                // as it does in front of a real service.
                RetryAfter::Now => OVERLOAD_RETRY,
                RetryAfter::After(ns) => ns.div_ceil(1_000 * MS) * 1_000 * MS,
                RetryAfter::Never => unreachable!("cost 1 always fits"),
            };
            refused[second] += 1;
            let mut backoff = || {
                let bound = (BACKOFF_BASE << (c.tries - 1).min(20)).min(BACKOFF_CAP);
                (rng.random() * bound as f64) as u64
            };
            let wait = match strategy {
                Strategy::Loop => Some(100 * MS),
                Strategy::RetryAfter => Some(retry_after),
                Strategy::Backoff => (c.tries < MAX_ATTEMPTS).then(&mut backoff),
                Strategy::Shaped => {
                    let budgeted = c.budget.decide(&budget_quota, now, 10).allowed;
                    (c.tries < MAX_ATTEMPTS && budgeted).then(|| retry_after.max(backoff()))
                }
            };
            match wait {
                Some(wait) => c.next_try = now + wait,
                None => {
                    given_up += 1;
                    c.backlog -= 1;
                    c.tries = 0;
                }
            }
        }
        if tick % TICKS_PER_S == TICKS_PER_S - 1 {
            backlog_at[second] = clients.iter().map(|c| c.backlog).sum();
        }
    }
    let attempts: u64 = load.iter().sum();
    let refused_all: u64 = refused.iter().sum();
    // Clients always have a request or two in flight; a backlog this small
    // is the steady state.
    let steady = CLIENTS as u64 / 10;
    let recovery_s = (DIP.end as usize..seconds)
        .find(|&s| backlog_at[s] <= steady && refused[s] * 20 <= load[s])
        .map(|s| s as u64 - DIP.end);
    StormRow {
        strategy,
        requests,
        attempts,
        load_mean: attempts as f64 / SECONDS as f64,
        load_peak: load.iter().copied().max().unwrap_or(0),
        refused_percent: 100.0 * refused_all as f64 / attempts.max(1) as f64,
        goodput: served.iter().sum::<u64>() as f64 / SECONDS as f64,
        given_up,
        recovery_s,
        load,
        served,
    }
}

/// Runs the scenario.
pub fn run() -> Scenario {
    let rows: Vec<StormRow> = Strategy::ALL.into_iter().map(simulate).collect();
    let line = |f: fn(&StormRow) -> &Vec<u64>| -> Vec<Series> {
        rows.iter()
            .map(|r| {
                Series::new(
                    r.strategy.label(),
                    f(r).iter().enumerate().map(|(s, &n)| (s as f64, n as f64)),
                )
            })
            .collect()
    };
    let chart = Chart {
        stem: "retry-storm".into(),
        panel_height: 380,
        panels: vec![
            Panel::Lines {
                title: format!(
                    "retry-storm: server load ({CLIENTS} clients, capacity {CAPACITY}/s, \
                     {DIP_CAPACITY}/s from {} s to {} s)",
                    DIP.start, DIP.end
                ),
                x_label: "time (s)".into(),
                y_label: "attempts reaching the server per second".into(),
                log_y: true,
                y_max: None,
                series: line(|r| &r.load),
                reference: Some(Reference::new(CAPACITY as f64, "capacity")),
            },
            Panel::Lines {
                title: "retry-storm: goodput".into(),
                x_label: "time (s)".into(),
                y_label: "requests served per second".into(),
                log_y: false,
                y_max: None,
                series: line(|r| &r.served),
                reference: Some(Reference::new(
                    CLIENTS as f64 * 1e9 / EVERY as f64,
                    "demand",
                )),
            },
        ],
    };
    let requests = rows.first().map_or(0, |r| r.requests);
    let checks = checks(&rows);
    Scenario {
        report: ScenarioReport {
            name: "retry-storm",
            title: "four ways to retry into a limited server whose capacity dips".into(),
            source: "seeds 000 and 004 (the ten-a-second retry loop)",
            traffic: format!(
                "{CLIENTS} clients, each wanting one request every 1.2 s (50/min); the server \
                 limits each client to 100/min (GCRA, burst 10) and serves {CAPACITY}/s, \
                 {DIP_CAPACITY}/s from {} s to {} s (503, Retry-After 1 s); {SECONDS} s in \
                 10 ms ticks.",
                DIP.start, DIP.end
            ),
            requests,
            rows: Vec::new(),
            details: Details::RetryStorm(StormReport { rows }),
            checks,
            notes: vec![
                "Load counts every attempt that reaches the server, refused or not. Retrying \
                 at once multiplies the load during the dip and keeps clients refused by their \
                 own per-client limit long after it; honouring Retry-After alone sends every \
                 waiting client back in the same second; jitter spreads them; the client \
                 layer also caps retries to a share of requests, so the load stays near \
                 the demand."
                    .to_string(),
                "Clients that only honour Retry-After come back together, in the same 10 ms \
                 tick a second later: the server's short burst allowance serves a few of each \
                 wave, the rest are refused and come back together again, and the backlog \
                 never drains within the run (a metastable overload). Jitter breaks the waves."
                    .to_string(),
                "Backing-off clients give up after six attempts, the shaped ones also when \
                 their retry budget is spent: what they give up is the price of not \
                 storming."
                    .to_string(),
            ],
            charts: vec!["retry-storm".into()],
        },
        charts: vec![chart],
    }
}

/// The seeds' two claims: the loop asks about ten times a second, and
/// clients that back off with jitter and cap their retries do not storm.
fn checks(rows: &[StormRow]) -> Vec<Check> {
    let row = |s| {
        rows.iter()
            .find(|r| r.strategy == s)
            .expect("every strategy ran")
    };
    let (storm, shaped) = (row(Strategy::Loop), row(Strategy::Shaped));
    let per_client = storm.load_peak as f64 / CLIENTS as f64;
    vec![
        Check::judged(
            "retry loop: attempts a second per waiting client at the peak",
            "about 10".into(),
            format!("{per_client:.1}"),
            (5.0..=10.0).contains(&per_client),
            "the loop retries every 100 ms, so at most 10 a second per client",
        ),
        Check::judged(
            "client layer: peak server load against the loop's",
            "far below (backoff, jitter, capped retries)".into(),
            format!("{} vs {}", shaped.load_peak, storm.load_peak),
            shaped.load_peak * 3 < storm.load_peak,
            "the shaped clients stormed",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_storms_and_the_shaped_clients_do_not() {
        let rows: Vec<StormRow> = Strategy::ALL.into_iter().map(simulate).collect();
        let row = |s| rows.iter().find(|r| r.strategy == s).unwrap();
        let (storm, shaped) = (row(Strategy::Loop), row(Strategy::Shaped));
        assert!(
            storm.load_peak > 3 * shaped.load_peak,
            "{} vs {}",
            storm.load_peak,
            shaped.load_peak
        );
        assert!(shaped.refused_percent < storm.refused_percent);
        for r in &rows {
            // Every request is served, given up or still waiting.
            let served: u64 = r.served.iter().sum();
            assert!(served + r.given_up <= r.requests);
            assert_eq!(r.attempts, r.load.iter().sum::<u64>());
        }
    }
}
