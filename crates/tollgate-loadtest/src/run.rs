//! The engine: connections pull the next due request from the shared
//! [`Schedule`], wait for its time, send it, and act on the answer as the
//! client's behaviour says.
//!
//! A connection that is free sleeps until the next due request; one that
//! picks up a request already later than `max_lateness` (every connection
//! was busy at its time) drops it and counts it, so a slow server shows as
//! dropped requests, never as a quietly lower offered load.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request};
use http_body_util::Empty;
use tokio::time::Instant;

use crate::client::{Answer, Conn, Failure};
use crate::config::{Backoff, Behaviour, Config};
use crate::schedule::{mix, Job, Kind, Schedule};
use crate::target::Target;

/// What became of one request that was sent.
#[derive(Clone, Copy, Debug)]
pub struct Record {
    /// The client.
    pub client: u32,
    /// Scheduled or a retry.
    pub kind: Kind,
    /// When it was due, ns from the start.
    pub due_ns: u64,
    /// When it was sent, ns from the start.
    pub sent_ns: u64,
    /// When its answer (or failure) came, ns from the start.
    pub done_ns: u64,
    /// The answer, or why there was none.
    pub outcome: Result<Answer, Failure>,
}

/// Counts of requests that were not sent.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unsent {
    /// Scheduled arrivals in all (sent or not).
    pub offered: u64,
    /// Due while every connection was busy, and dropped.
    pub dropped: u64,
    /// Withheld by clients honouring a `Retry-After`.
    pub withheld: u64,
    /// Retries due after the end of the run.
    pub retries_past_end: u64,
    /// Refusals a backoff or honour client did not retry: out of retries,
    /// or (honour) no valid `Retry-After` to wait for.
    pub gave_up: u64,
}

/// Everything one run produced.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Every request sent, in no particular order.
    pub records: Vec<Record>,
    /// What was not sent.
    pub unsent: Unsent,
    /// From the start to the last answer, ns.
    pub elapsed_ns: u64,
}

/// One client's state, as its behaviour needs it.
struct ClientState {
    behaviour: Behaviour,
    /// Honour: waiting for a retry at `Retry-After`; scheduled arrivals
    /// are withheld meanwhile.
    waiting: bool,
    rng: fastrand::Rng,
}

/// The schedule and the clients, under one lock.
struct Plan {
    schedule: Schedule,
    clients: Vec<ClientState>,
    unsent: Unsent,
}

/// What every connection shares.
struct Shared {
    start: Instant,
    plan: Mutex<Plan>,
    target: Target,
    key_header: HeaderName,
    keys: Vec<HeaderValue>,
    host: HeaderValue,
    /// Requests in flight per client (outside the lock: an answer that
    /// changes nothing else takes no lock).
    in_flight: Vec<AtomicU32>,
    timeout: Duration,
    max_lateness_ns: u64,
    backoff: Backoff,
    end_ns: u64,
    /// Closed loop: no schedule, nothing is ever late.
    closed: bool,
    offered: Arc<AtomicU64>,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn plan(&self) -> std::sync::MutexGuard<'_, Plan> {
        // A panicking connection task cannot leave the plan half-updated
        // in a way that matters more than losing the report.
        self.plan.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn request(&self, client: u32) -> Request<Empty<Bytes>> {
        let mut request = Request::new(Empty::new());
        *request.method_mut() = Method::GET;
        *request.uri_mut() = self.target.path.clone().into();
        let headers = request.headers_mut();
        headers.insert(http::header::HOST, self.host.clone());
        headers.insert(self.key_header.clone(), self.keys[client as usize].clone());
        request
    }
}

/// Runs the load against `target` with `rate` per client (`None`: closed
/// loop); `offered` counts scheduled arrivals as they are taken, for a
/// progress display.
pub async fn run(
    config: &Config,
    target: Target,
    rate: Option<f64>,
    offered: Arc<AtomicU64>,
) -> Result<Outcome, crate::Error> {
    let key_header = HeaderName::from_bytes(config.key_header.as_bytes()).map_err(|_| {
        crate::Error::Config(format!("`{}` is not a header name", config.key_header))
    })?;
    let keys = (0..config.clients)
        .map(|i| {
            let key = config.key(i);
            HeaderValue::from_str(&key)
                .map_err(|_| crate::Error::Config(format!("key `{key}` is not a header value")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let end_ns = config
        .duration
        .map_or(u64::MAX, |d| d.as_nanos().min(u64::MAX as u128) as u64);
    let max = config.requests.unwrap_or(u64::MAX);
    let schedule = match rate {
        Some(rate) => Schedule::new(
            config.clients,
            rate,
            config.arrivals,
            config.seed,
            end_ns,
            max,
        ),
        None => Schedule::closed(config.clients, end_ns, max),
    };
    let closed = schedule.is_closed();
    let behaviours = config.mix.assign(config.clients);
    let clients = behaviours
        .into_iter()
        .enumerate()
        .map(|(i, behaviour)| ClientState {
            behaviour,
            waiting: false,
            rng: fastrand::Rng::with_seed(mix(config.seed.wrapping_add(0x5eed) ^ mix(i as u64))),
        })
        .collect();
    let host = HeaderValue::from_str(target.authority.as_str())
        .map_err(|_| crate::Error::Target(format!("`{}`: bad host", config.url)))?;
    let in_flight = (0..config.clients).map(|_| AtomicU32::new(0)).collect();
    let shared = Arc::new(Shared {
        start: Instant::now(),
        plan: Mutex::new(Plan {
            schedule,
            clients,
            unsent: Unsent::default(),
        }),
        target,
        key_header,
        keys,
        host,
        in_flight,
        timeout: config.timeout,
        max_lateness_ns: config.max_lateness.as_nanos().min(u64::MAX as u128) as u64,
        backoff: config.backoff,
        end_ns,
        closed,
        offered,
    });
    let sinks: Vec<Arc<Mutex<Vec<Record>>>> = (0..config.connections.max(1))
        .map(|_| Arc::default())
        .collect();
    // Every wait in a connection is bounded (by the schedule's end, the
    // timeout and the backoff cap), so this is a safety net only: a run
    // never outlives its bounds by more than this.
    let last_retry = config.backoff.cap.max(Duration::from_secs(1));
    let hard_stop = config
        .duration
        .map(|d| shared.start + d + config.timeout * 2 + last_retry + Duration::from_secs(1));
    // One single-threaded runtime per core, as wrk has one event loop per
    // thread: a connection's wake-ups stay on its thread.
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(sinks.len());
    let mut handles = Vec::new();
    for t in 0..threads {
        let mine: Vec<_> = sinks.iter().skip(t).step_by(threads).cloned().collect();
        let shared = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name(format!("loadtest-{t}"))
            .spawn(move || event_loop(shared, mine, hard_stop));
        handles.push(
            spawned.map_err(|e| crate::Error::Config(format!("cannot start a thread: {e}")))?,
        );
    }
    for handle in handles {
        let joined = tokio::task::spawn_blocking(move || handle.join()).await;
        if !matches!(joined, Ok(Ok(()))) {
            return Err(crate::Error::Config("a load thread failed".into()));
        }
    }
    let elapsed_ns = shared.now_ns();
    let records = sinks
        .iter()
        .flat_map(|s| std::mem::take(&mut *s.lock().unwrap_or_else(|e| e.into_inner())))
        .collect();
    let plan = shared.plan();
    let mut unsent = plan.unsent;
    unsent.offered = plan.schedule.offered;
    unsent.retries_past_end = plan.schedule.retries_past_end;
    Ok(Outcome {
        records,
        unsent,
        elapsed_ns,
    })
}

/// Runs the connections of `sinks` on this thread until they end (or the
/// hard stop passes; they are then dropped, closing their sockets).
fn event_loop(
    shared: Arc<Shared>,
    sinks: Vec<Arc<Mutex<Vec<Record>>>>,
    hard_stop: Option<Instant>,
) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    runtime.block_on(async move {
        let mut tasks = tokio::task::JoinSet::new();
        for sink in sinks {
            tasks.spawn(connection(Arc::clone(&shared), sink));
        }
        let all = async { while tasks.join_next().await.is_some() {} };
        match hard_stop {
            Some(at) => {
                let _ = tokio::time::timeout_at(at, all).await;
            }
            None => all.await,
        }
    });
}

/// One connection's loop.
async fn connection(shared: Arc<Shared>, sink: Arc<Mutex<Vec<Record>>>) {
    let mut conn: Option<Conn> = None;
    loop {
        // One lock takes the job and, when it is already due, admits it
        // (the closed loop and a busy run need no second lock).
        let (job, admitted) = {
            let mut plan = shared.plan();
            let Some(job) = plan.schedule.pop() else {
                break;
            };
            shared
                .offered
                .store(plan.schedule.offered, Ordering::Relaxed);
            let now = shared.now_ns();
            let scheduled = job.kind == Kind::Scheduled;
            if shared.closed && scheduled {
                if now >= shared.end_ns {
                    // The run is over: this request is not offered after all.
                    plan.schedule.give_back();
                    shared
                        .offered
                        .store(plan.schedule.offered, Ordering::Relaxed);
                    break;
                }
            } else if now > job.due_ns.saturating_add(shared.max_lateness_ns) {
                plan.unsent.dropped += u64::from(scheduled);
                continue;
            }
            let due = shared.closed && scheduled || job.due_ns <= now;
            if due && !admit(&shared, &mut plan, job) {
                continue;
            }
            (job, due)
        };
        if !admitted {
            tokio::time::sleep_until(shared.start + Duration::from_nanos(job.due_ns)).await;
            if !admit(&shared, &mut shared.plan(), job) {
                continue;
            }
        }
        let sent_ns = shared.now_ns();
        let outcome = exchange(&shared, &mut conn, job.client).await;
        let done_ns = shared.now_ns();
        react(&shared, job, &outcome, done_ns);
        sink.lock().unwrap_or_else(|e| e.into_inner()).push(Record {
            client: job.client,
            kind: job.kind,
            due_ns: job.due_ns,
            sent_ns,
            done_ns,
            outcome,
        });
    }
}

/// Whether `job` goes out now: a scheduled arrival of a client waiting for
/// its `Retry-After` is withheld instead.
fn admit(shared: &Shared, plan: &mut Plan, job: Job) -> bool {
    if job.kind == Kind::Scheduled && plan.clients[job.client as usize].waiting {
        plan.unsent.withheld += 1;
        return false;
    }
    shared.in_flight[job.client as usize].fetch_add(1, Ordering::Relaxed);
    true
}

/// Sends one request on `conn`, opening a connection when there is none.
async fn exchange(
    shared: &Shared,
    conn: &mut Option<Conn>,
    client: u32,
) -> Result<Answer, Failure> {
    if let Some(open) = conn.as_mut() {
        if open.is_closed().await {
            *conn = None;
        }
    }
    if conn.is_none() {
        *conn = Some(Conn::open(shared.target.addr, shared.timeout).await?);
    }
    let Some(open) = conn.as_mut() else {
        return Err(Failure::Connect);
    };
    let answer = open.send(shared.request(client), shared.timeout).await;
    if answer.is_err() {
        *conn = None;
    }
    answer
}

/// Updates the client after an answer: honour waits for `Retry-After` and
/// retries then; backoff retries after a jittered exponential wait.
fn react(shared: &Shared, job: Job, outcome: &Result<Answer, Failure>, now_ns: u64) {
    shared.in_flight[job.client as usize].fetch_sub(1, Ordering::Relaxed);
    let is_retry_at_retry_after = matches!(
        job.kind,
        Kind::Retry {
            at_retry_after: true,
            ..
        }
    );
    let refused = matches!(outcome, Ok(a) if a.status == 429 || a.status == 503);
    if !refused && !is_retry_at_retry_after {
        return;
    }
    let mut plan = shared.plan();
    let Plan {
        schedule,
        clients,
        unsent,
    } = &mut *plan;
    let client = &mut clients[job.client as usize];
    if is_retry_at_retry_after {
        client.waiting = false;
    }
    if !refused {
        return;
    }
    let attempt = match job.kind {
        Kind::Scheduled => 1,
        Kind::Retry { attempt, .. } => attempt + 1,
    };
    match client.behaviour {
        Behaviour::Ignore => {}
        // Another refusal while already waiting (a request that was in
        // flight) does not start a second wait.
        Behaviour::Honour if client.waiting => {}
        Behaviour::Honour => match outcome {
            Ok(Answer {
                retry_after: Some(secs),
                ..
            }) if attempt <= shared.backoff.max_retries => {
                client.waiting = true;
                let due_ns = now_ns.saturating_add(secs.saturating_mul(1_000_000_000));
                if due_ns >= schedule.end_ns() {
                    client.waiting = false;
                }
                schedule.retry(Job {
                    due_ns,
                    seq: 0,
                    client: job.client,
                    kind: Kind::Retry {
                        attempt,
                        at_retry_after: true,
                        clean: shared.in_flight[job.client as usize].load(Ordering::Relaxed) == 0,
                    },
                });
            }
            _ => unsent.gave_up += 1,
        },
        Behaviour::Backoff if attempt <= shared.backoff.max_retries => {
            let rules = tollgate_http::client::Retry {
                base: shared.backoff.base,
                cap: shared.backoff.cap,
                ..Default::default()
            };
            let rng = &mut client.rng;
            let wait = rules.backoff(attempt, |upper| rng.u64(0..=upper));
            schedule.retry(Job {
                due_ns: now_ns.saturating_add(wait.as_nanos() as u64),
                seq: 0,
                client: job.client,
                kind: Kind::Retry {
                    attempt,
                    at_retry_after: false,
                    clean: false,
                },
            });
        }
        Behaviour::Backoff => unsent.gave_up += 1,
    }
}
