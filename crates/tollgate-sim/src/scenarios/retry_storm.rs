//! The retry storm: many clients against one limited server whose capacity
//! dips, each client with several callers (tasks) working at once,
//! retrying five ways: at once (the ten-a-second loop), after
//! `Retry-After`, with exponential backoff and full jitter, and shaped the
//! way tollgate-http's client layer does it (a local GCRA at the announced
//! limit, the key paused on `Retry-After`, backoff with jitter, a retry
//! budget), once letting the callers go in bursts and once paced one
//! interval apart (the layer's default).
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
/// Callers (concurrent tasks) per client: each works on one request.
const CALLERS: usize = 8;
/// Requests arrive in batches of one per caller, every `BATCH` × `EVERY`
/// (a job fanning out to its tasks), at the same mean rate.
const BATCH: u64 = CALLERS as u64;
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
    /// Shaped at the announced limit with its burst, pauses on
    /// `Retry-After`, backoff with jitter, at most six attempts, retries
    /// within a 10% budget.
    Shaped,
    /// As `Shaped`, but the callers' requests leave one interval apart.
    Paced,
}

impl Strategy {
    const ALL: [Strategy; 5] = [
        Strategy::Loop,
        Strategy::RetryAfter,
        Strategy::Backoff,
        Strategy::Shaped,
        Strategy::Paced,
    ];

    fn label(self) -> &'static str {
        match self {
            Strategy::Loop => "retry at once (10/s loop)",
            Strategy::RetryAfter => "honour Retry-After",
            Strategy::Backoff => "backoff + full jitter",
            Strategy::Shaped => "client layer, bursts",
            Strategy::Paced => "client layer, paced",
        }
    }

    /// Whether the client layer's shaping, pauses and budget apply.
    fn shaped(self) -> bool {
        matches!(self, Strategy::Shaped | Strategy::Paced)
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

/// One caller's request.
#[derive(Clone, Copy, Default)]
struct Caller {
    /// Whether it has a request.
    busy: bool,
    /// When it may be tried (ns).
    next_try: u64,
    /// Attempts made for it.
    tries: u32,
}

/// One client's state.
struct Client {
    /// Requests waiting for a free caller.
    backlog: u64,
    next_arrival: u64,
    callers: [Caller; CALLERS],
    /// For the client layer: the key's pause (ns), for all its callers.
    paused_until: u64,
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
    // Paced: the same rate, one request at a time.
    let own = match strategy {
        Strategy::Paced => quota.with_burst(1).expect("valid"),
        _ => quota,
    };
    let budget_quota = budget();
    let mut clients: Vec<Client> = (0..CLIENTS)
        .map(|_| Client {
            backlog: 0,
            next_arrival: (rng.random() * (BATCH * EVERY) as f64) as u64,
            callers: [Caller::default(); CALLERS],
            paused_until: 0,
            server: State::new(Algorithm::Gcra, &quota),
            shaper: State::new(Algorithm::Gcra, &own),
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
                c.backlog += BATCH;
                requests += BATCH;
                c.next_arrival += BATCH * EVERY;
                if strategy.shaped() {
                    // Each request deposits its share of a retry.
                    c.budget.refund(&budget_quota, now, BATCH);
                }
            }
            for k in 0..CALLERS {
                if !c.callers[k].busy {
                    if c.backlog == 0 {
                        continue;
                    }
                    c.backlog -= 1;
                    c.callers[k] = Caller {
                        busy: true,
                        next_try: now,
                        tries: 0,
                    };
                }
                let caller = &mut c.callers[k];
                if caller.next_try > now {
                    continue;
                }
                if strategy.shaped() {
                    if c.paused_until > now {
                        caller.next_try = c.paused_until;
                        continue;
                    }
                    let d = c.shaper.decide(&own, now, 1);
                    if let RetryAfter::After(wait) = d.retry_after {
                        caller.next_try = now + wait;
                        continue;
                    }
                }
                load[second] += 1;
                caller.tries += 1;
                let limited = c.server.decide(&quota, now, 1);
                let retry_after = match limited.retry_after {
                    RetryAfter::Now if allowance >= 100 => {
                        allowance -= 100;
                        served[second] += 1;
                        caller.busy = false;
                        continue;
                    }
                    // Over capacity: the charge for the per-client limit
                    // stays, as it does in front of a real service.
                    RetryAfter::Now => OVERLOAD_RETRY,
                    RetryAfter::After(ns) => ns.div_ceil(1_000 * MS) * 1_000 * MS,
                    RetryAfter::Never => unreachable!("cost 1 always fits"),
                };
                refused[second] += 1;
                let tries = caller.tries;
                let mut backoff = || {
                    let bound = (BACKOFF_BASE << (tries - 1).min(20)).min(BACKOFF_CAP);
                    (rng.random() * bound as f64) as u64
                };
                let wait = match strategy {
                    Strategy::Loop => Some(100 * MS),
                    Strategy::RetryAfter => Some(retry_after),
                    Strategy::Backoff => (tries < MAX_ATTEMPTS).then(&mut backoff),
                    Strategy::Shaped | Strategy::Paced => {
                        // The whole key pauses, not only this caller.
                        c.paused_until = c.paused_until.max(now + retry_after);
                        let budgeted = c.budget.decide(&budget_quota, now, 10).allowed;
                        (tries < MAX_ATTEMPTS && budgeted).then(|| retry_after.max(backoff()))
                    }
                };
                let caller = &mut c.callers[k];
                match wait {
                    Some(wait) => caller.next_try = now + wait,
                    None => {
                        given_up += 1;
                        caller.busy = false;
                    }
                }
            }
        }
        if tick % TICKS_PER_S == TICKS_PER_S - 1 {
            backlog_at[second] = clients
                .iter()
                .map(|c| c.backlog + c.callers.iter().filter(|k| k.busy).count() as u64)
                .sum();
        }
    }
    let attempts: u64 = load.iter().sum();
    let refused_all: u64 = refused.iter().sum();
    // A client paced at its limit works through a batch for seconds: up to
    // a batch each is the steady state.
    let steady = CLIENTS as u64 * BATCH;
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
            title: "five ways to retry into a limited server whose capacity dips".into(),
            source: "seeds 000 and 004 (the ten-a-second retry loop)",
            traffic: format!(
                "{CLIENTS} clients of {CALLERS} callers each, each client wanting a batch of \
                 {BATCH} requests every {:.1} s (50/min), one per caller; the server \
                 limits each client to 100/min (GCRA, burst 10) and serves {CAPACITY}/s, \
                 {DIP_CAPACITY}/s from {} s to {} s (503, Retry-After 1 s); {SECONDS} s in \
                 10 ms ticks.",
                (BATCH * EVERY) as f64 / 1e9,
                DIP.start,
                DIP.end
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
                "What pacing saves: with bursts, a client's callers go together when a batch \
                 arrives or a pause ends (the client's own limit has a burst of 10); paced, \
                 they leave one interval (0.6 s) apart, so the server sees a lower peak, \
                 refuses fewer and is back to normal sooner after the dip."
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
    let per_caller = storm.load_peak as f64 / (CLIENTS * CALLERS) as f64;
    vec![
        Check::judged(
            "retry loop: attempts a second per waiting caller at the peak",
            "about 10".into(),
            format!("{per_caller:.1}"),
            (5.0..=10.0).contains(&per_caller),
            "the loop retries every 100 ms, so at most 10 a second per caller",
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
        let paced = row(Strategy::Paced);
        assert!(
            paced.load_peak < shaped.load_peak && paced.refused_percent < shaped.refused_percent,
            "pacing saved nothing: {paced:?} vs {shaped:?}"
        );
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
