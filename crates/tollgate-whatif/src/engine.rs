//! The run: one thread reads and parses the log and derives each request's
//! keys; worker threads own disjoint sets of keys (by a hash of the key) and
//! decide every candidate policy for each request of their keys.
//!
//! Exactness: each key's requests reach its worker in the log's order and are
//! decided with [`tollgate_core::decide_all`] on that key's states, which is
//! what `tollgate replay` does with the same trace; a request earlier than the
//! key's last charge is decided at that charge's time (the key's clock rule
//! of `docs/SEMANTICS.md`), so a log a few seconds out of order is handled as
//! replay handles it. Memory is bounded by the keys, not the log: per key
//! and policy the states and a few counters; per route and hour one count.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::io::{Read, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use foldhash::fast::FixedState;
use tollgate_core::{decide_all, Limit, State};
use tollgate_http::{ClientIp, KeyError, MissingKey, Routes};

use crate::fields::{Fields, Wanted};
use crate::format::{envoy, trace_line, Format, FormatError, FormatName, Malformed};
use crate::input::{Line, Lines};
use crate::keys::Views;
use crate::policy::Candidates;

/// Requests per batch sent to a worker.
const BATCH: usize = 8192;
/// Batches queued per worker before the reader waits.
const QUEUE: usize = 4;
/// Distinct routes reported; later ones are counted under [`OTHER_ROUTES`].
pub const MAX_ROUTES: usize = 1000;
/// The route of requests past [`MAX_ROUTES`].
pub const OTHER_ROUTES: &str = "(other routes)";
/// Malformed lines kept as samples.
pub const SAMPLES: usize = 5;
const MINUTE_NS: u64 = 60_000_000_000;
const HOUR_NS: u64 = 3_600_000_000_000;

/// How to read the log.
#[derive(Clone, Debug)]
pub struct Options {
    /// The log's format.
    pub format: FormatName,
    /// How the client's address is found (trusted proxies).
    pub client_ip: ClientIp,
    /// Route templates for paths.
    pub routes: Routes,
    /// Stop at the first malformed line.
    pub strict: bool,
    /// Worker threads deciding (at least 1).
    pub workers: usize,
}

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Reading the input failed.
    #[error("reading the log")]
    Read(#[source] std::io::Error),
    /// The format cannot be used.
    #[error("{0}")]
    Format(#[from] FormatError),
    /// A CSV trace without its header.
    #[error(
        "the CSV trace must start with the header `{}`",
        tollgate_trace::trace::INPUT_HEADER
    )]
    TraceHeader,
    /// Writing the converted trace failed.
    #[error("writing the trace")]
    WriteTrace(#[source] std::io::Error),
    /// `--strict` and a malformed line.
    #[error("line {line}: {reason}: {text}")]
    Strict {
        /// 1-based line number.
        line: u64,
        /// Why.
        reason: String,
        /// The line, shortened and escaped.
        text: String,
    },
}

/// A malformed line kept as an example.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Sample {
    /// 1-based line number.
    pub line: u64,
    /// Why it was not read.
    pub reason: String,
    /// The line, shortened, lossy UTF-8 with control characters escaped.
    pub text: String,
}

/// Lines not read.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MalformedLines {
    /// How many.
    pub count: u64,
    /// The first few.
    pub samples: Vec<Sample>,
}

/// One key of a lane, with its volume and, per policy of the lane, what
/// happened to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyOutcome {
    /// The key as derived (the HTTP layer's text; a trace's bytes).
    pub key: Box<[u8]>,
    /// Its requests.
    pub volume: u64,
    /// Per policy of the lane, in the lane's policy order.
    pub policies: Vec<KeyPolicy>,
}

/// What one policy did to one key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyPolicy {
    /// Requests refused.
    pub refused: u64,
    /// The minute (since the epoch, by the key's clock) with the most
    /// refusals.
    pub worst_minute: u64,
    /// Refusals in that minute.
    pub worst_refused: u64,
    /// Requests in that minute.
    pub worst_requests: u64,
    minute_refused: u64,
}

/// What a lane saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaneOutcome {
    /// Requests the lane applies to, with a key.
    pub requests: u64,
    /// Requests it applies to without a key (or with a cost that cannot be
    /// read): the HTTP layer answers them 400 (411) whatever the policy.
    pub no_key: u64,
    /// Its policies' indexes.
    pub policies: Vec<usize>,
    /// Its keys, by volume (most first, then by key).
    pub keys: Vec<KeyOutcome>,
}

/// Counts of one route or hour.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    /// Requests, per lane.
    pub requests: Vec<u64>,
    /// Refused, per policy.
    pub refused: Vec<u64>,
}

/// Everything a run counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Lines read (malformed ones included; a trace's header excluded).
    pub lines: u64,
    /// Lines not read.
    pub malformed: MalformedLines,
    /// The earliest and latest request time.
    pub span: Option<(u64, u64)>,
    /// Per lane.
    pub lanes: Vec<LaneOutcome>,
    /// Refused, per policy.
    pub refused: Vec<u64>,
    /// Per route name, in name order.
    pub routes: Vec<(String, Bucket)>,
    /// Per hour since the epoch, in time order.
    pub hours: Vec<(u64, Bucket)>,
}

/// One request on its way to a worker.
#[derive(Default)]
struct Batch {
    lane: Vec<u32>,
    key_end: Vec<u32>,
    keys: Vec<u8>,
    t: Vec<u64>,
    cost: Vec<u64>,
    route: Vec<u32>,
}

impl Batch {
    fn len(&self) -> usize {
        self.t.len()
    }
}

/// Decides the log read from `input` with every candidate; `progress` is
/// called now and then as the reading goes on.
pub fn run(
    input: impl Read,
    candidates: &Candidates,
    options: &Options,
    progress: &mut dyn FnMut(),
) -> Result<Outcome, RunError> {
    run_with_trace(input, candidates, options, None, progress)
}

/// [`run`], also writing the first lane's requests to `trace` as the CSV
/// trace `tollgate replay` reads (`t_ns,key,cost`; a `,` in a key written
/// `%2C`, which no derived key holds otherwise since `%` is escaped).
pub fn run_with_trace(
    input: impl Read,
    candidates: &Candidates,
    options: &Options,
    trace: Option<&mut dyn Write>,
    progress: &mut dyn FnMut(),
) -> Result<Outcome, RunError> {
    let wanted = Wanted::of(
        candidates.lanes.iter().map(|l| &l.key),
        candidates.lanes.iter().map(|l| &l.cost),
        &options.client_ip,
    );
    let format = options.format.compile(&wanted)?;
    let plan = Plan::new(candidates);
    let workers = options.workers.max(1);
    std::thread::scope(|scope| {
        let mut senders = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (tx, rx) = sync_channel::<Batch>(QUEUE);
            senders.push(tx);
            let plan = &plan;
            handles.push(scope.spawn(move || Worker::new(plan).run(rx)));
        }
        let mut reader = Reader {
            candidates,
            options,
            wanted: &wanted,
            format: &format,
            views: Views::default(),
            key: String::new(),
            route_ids: HashMap::new(),
            route_names: Vec::new(),
            batches: (0..workers).map(|_| Batch::default()).collect(),
            senders,
            outcome: Outcome::default(),
            hasher: FixedState::with_seed(0x7011_6a7e),
            trace,
            trace_error: None,
        };
        let read = reader
            .start_trace()
            .and_then(|()| reader.read(input, progress));
        // Closing the channels ends the workers, also after an error.
        let Reader {
            senders,
            route_names,
            mut outcome,
            ..
        } = reader;
        drop(senders);
        let results: Vec<WorkerOut> = handles
            .into_iter()
            .map(|h| h.join().expect("a worker panicked"))
            .collect();
        read?;
        merge(&plan, &mut outcome, route_names, results);
        Ok(outcome)
    })
}

/// The candidates laid out for the workers.
struct Plan {
    /// Per lane: its policies' indexes.
    lane_policies: Vec<Vec<usize>>,
    /// Per lane: every limit of its policies, one after the other.
    lane_limits: Vec<Vec<Limit>>,
    /// Per lane and policy of the lane: its range in `lane_limits`.
    lane_ranges: Vec<Vec<std::ops::Range<usize>>>,
    policies: usize,
}

impl Plan {
    fn new(c: &Candidates) -> Self {
        let mut plan = Plan {
            lane_policies: vec![Vec::new(); c.lanes.len()],
            lane_limits: vec![Vec::new(); c.lanes.len()],
            lane_ranges: vec![Vec::new(); c.lanes.len()],
            policies: c.policies.len(),
        };
        for (i, p) in c.policies.iter().enumerate() {
            let limits = &mut plan.lane_limits[p.lane];
            let start = limits.len();
            limits.extend_from_slice(&p.limits);
            plan.lane_ranges[p.lane].push(start..limits.len());
            plan.lane_policies[p.lane].push(i);
        }
        plan
    }
}

struct Reader<'a, 'w> {
    candidates: &'a Candidates,
    options: &'a Options,
    wanted: &'a Wanted,
    format: &'a Format,
    views: Views,
    key: String,
    route_ids: HashMap<String, u32>,
    route_names: Vec<String>,
    batches: Vec<Batch>,
    senders: Vec<SyncSender<Batch>>,
    outcome: Outcome,
    hasher: FixedState,
    trace: Option<&'w mut dyn Write>,
    /// The first error writing the trace, reported once the reading stops.
    trace_error: Option<std::io::Error>,
}

impl<'a> Reader<'a, '_> {
    fn start_trace(&mut self) -> Result<(), RunError> {
        if let Some(out) = self.trace.as_mut() {
            writeln!(out, "{}", tollgate_trace::trace::INPUT_HEADER)
                .map_err(RunError::WriteTrace)?;
        }
        Ok(())
    }

    fn write_trace(&mut self, key: &[u8], t: u64, cost: u64) -> std::io::Result<()> {
        let Some(out) = self.trace.as_mut() else {
            return Ok(());
        };
        let mut numbers = itoa::Buffer::new();
        let mut write = || -> std::io::Result<()> {
            out.write_all(numbers.format(t).as_bytes())?;
            out.write_all(b",")?;
            for part in key.split(|&b| b == b',').enumerate() {
                if part.0 > 0 {
                    out.write_all(b"%2C")?;
                }
                out.write_all(part.1)?;
            }
            out.write_all(b",")?;
            out.write_all(numbers.format(cost).as_bytes())?;
            out.write_all(b"\n")
        };
        write()
    }

    fn read(&mut self, input: impl Read, progress: &mut dyn FnMut()) -> Result<(), RunError> {
        let mut lines = Lines::new(input);
        let mut number = 0u64;
        if matches!(self.format, Format::Trace) {
            match lines.next_line().map_err(RunError::Read)? {
                Some(Line::Text(h)) if h == tollgate_trace::trace::INPUT_HEADER.as_bytes() => {
                    number += 1
                }
                None => return Ok(()),
                _ => return Err(RunError::TraceHeader),
            }
        }
        while let Some(line) = lines.next_line().map_err(RunError::Read)? {
            number += 1;
            self.outcome.lines += 1;
            let (parsed, text) = match line {
                Line::TooLong(head) => (Err(Malformed::TooLong), head),
                Line::Text(text) => (self.parse(text), text),
            };
            if let Err(why) = parsed {
                self.malformed(number, &why, text)?;
            }
            if number.is_multiple_of(1 << 16) {
                progress();
                if let Some(e) = self.trace_error.take() {
                    return Err(RunError::WriteTrace(e));
                }
            }
        }
        for w in 0..self.batches.len() {
            self.flush(w);
        }
        progress();
        if let Some(out) = self.trace.as_mut() {
            if let Err(e) = out.flush() {
                self.trace_error.get_or_insert(e);
            }
        }
        match self.trace_error.take() {
            Some(e) => Err(RunError::WriteTrace(e)),
            None => Ok(()),
        }
    }

    fn parse(&mut self, text: &[u8]) -> Result<(), Malformed> {
        match self.format {
            Format::Nginx(f) => {
                let fields = f.parse(text)?;
                self.emit(&fields);
            }
            Format::Envoy => {
                let object = envoy::object(text)?;
                let fields = envoy::fields(&object, self.wanted)?;
                self.emit(&fields);
            }
            Format::Trace => {
                let fields = trace_line(text)?;
                self.emit(&fields);
            }
        }
        Ok(())
    }

    fn malformed(&mut self, line: u64, why: &Malformed, text: &[u8]) -> Result<(), RunError> {
        let m = &mut self.outcome.malformed;
        m.count += 1;
        let shown = || tollgate_trace::trace::shorten_to(text, 160);
        if self.options.strict {
            return Err(RunError::Strict {
                line,
                reason: why.to_string(),
                text: shown(),
            });
        }
        if m.samples.len() < SAMPLES {
            m.samples.push(Sample {
                line,
                reason: why.to_string(),
                text: shown(),
            });
        }
        Ok(())
    }

    /// The route's id, and its template for the view (borrowed from the
    /// path or the templates: a path without item segments allocates
    /// nothing here).
    fn route_id<'p>(&mut self, path: &'p str) -> (u32, Option<Cow<'p, str>>)
    where
        'a: 'p,
    {
        if path.is_empty() {
            return (self.intern("-"), None);
        }
        let routes: &'a Routes = &self.options.routes;
        let route = routes.route(path);
        (self.intern(&route), Some(route))
    }

    fn intern(&mut self, route: &str) -> u32 {
        if let Some(&id) = self.route_ids.get(route) {
            return id;
        }
        let name = if self.route_names.len() >= MAX_ROUTES {
            OTHER_ROUTES
        } else {
            route
        };
        if let Some(&id) = self.route_ids.get(name) {
            return id;
        }
        let id = self.route_names.len() as u32;
        self.route_names.push(name.to_string());
        self.route_ids.insert(name.to_string(), id);
        id
    }

    fn emit(&mut self, f: &Fields<'_>) {
        let t = f.t_ns.expect("every parser sets the time");
        self.outcome.span = Some(match self.outcome.span {
            None => (t, t),
            Some((a, b)) => (a.min(t), b.max(t)),
        });
        if let Some(key) = f.key {
            // A trace: its own key and cost, as `tollgate replay` reads them.
            let route = self.intern("-");
            for lane in 0..self.candidates.lanes.len() {
                self.push(lane, key, t, f.cost.unwrap_or(1), route);
            }
            return;
        }
        let (route, template) = self.route_id(f.path);
        let mut views = std::mem::take(&mut self.views);
        let mut key = std::mem::take(&mut self.key);
        let (candidates, options) = (self.candidates, self.options);
        views.with(self.wanted, f, template.as_deref(), |view| {
            for (i, lane) in candidates.lanes.iter().enumerate() {
                if lane
                    .rule
                    .as_ref()
                    .is_some_and(|r| !r.match_spec().matches(view))
                {
                    continue;
                }
                key.clear();
                let derived = lane.key.derive_into(view, &options.client_ip, &mut key);
                if matches!(derived, Err(KeyError::Missing(_))) && lane.missing == MissingKey::Skip
                {
                    continue;
                }
                // The rule's floor on a client-chosen cost, as the layer.
                let min = lane.rule.as_ref().map_or(1, |r| r.min_cost_spec());
                let cost = lane.cost.at_least(min, view);
                match (derived, cost) {
                    (Ok(()), Ok(cost)) => self.push(i, key.as_bytes(), t, cost, route),
                    _ => {
                        let lanes = &mut self.outcome.lanes;
                        if lanes.len() <= i {
                            lanes.resize(i + 1, LaneOutcome::default());
                        }
                        lanes[i].no_key += 1;
                    }
                }
            }
        });
        self.views = views;
        self.key = key;
    }

    fn push(&mut self, lane: usize, key: &[u8], t: u64, cost: u64, route: u32) {
        if lane == 0 && self.trace.is_some() && self.trace_error.is_none() {
            self.trace_error = self.write_trace(key, t, cost).err();
        }
        let w = if self.batches.len() == 1 {
            0
        } else {
            let mut h = self.hasher.build_hasher();
            lane.hash(&mut h);
            key.hash(&mut h);
            (h.finish() % self.batches.len() as u64) as usize
        };
        let b = &mut self.batches[w];
        b.lane.push(lane as u32);
        b.keys.extend_from_slice(key);
        b.key_end.push(b.keys.len() as u32);
        b.t.push(t);
        b.cost.push(cost);
        b.route.push(route);
        if b.len() >= BATCH {
            self.flush(w);
        }
    }

    fn flush(&mut self, w: usize) {
        if self.batches[w].len() == 0 {
            return;
        }
        let batch = std::mem::take(&mut self.batches[w]);
        // A worker only stops early by panicking, which `run` reports.
        let _ = self.senders[w].send(batch);
    }
}

/// One key's states and counters in a worker.
struct Slot {
    volume: u64,
    /// The key's clock: the latest time seen, so minutes never go back.
    clock: u64,
    minute: u64,
    minute_requests: u64,
    states: Box<[State]>,
    policies: Box<[KeyPolicy]>,
}

impl Slot {
    /// Closes the current minute: it becomes the worst if it refused more.
    fn close_minute(&mut self) {
        for p in self.policies.iter_mut() {
            if p.minute_refused > p.worst_refused {
                p.worst_refused = p.minute_refused;
                p.worst_minute = self.minute;
                p.worst_requests = self.minute_requests;
            }
            p.minute_refused = 0;
        }
        self.minute_requests = 0;
    }
}

struct Worker<'a> {
    plan: &'a Plan,
    keys: Vec<HashMap<Box<[u8]>, Slot, foldhash::fast::RandomState>>,
    lane_requests: Vec<u64>,
    refused: Vec<u64>,
    routes: Vec<Bucket>,
    hour_index: HashMap<u64, usize>,
    hours: Vec<(u64, Bucket)>,
}

struct WorkerOut {
    keys: Vec<Vec<KeyOutcome>>,
    lane_requests: Vec<u64>,
    refused: Vec<u64>,
    routes: Vec<Bucket>,
    hours: Vec<(u64, Bucket)>,
}

fn bucket(plan: &Plan) -> Bucket {
    Bucket {
        requests: vec![0; plan.lane_policies.len()],
        refused: vec![0; plan.policies],
    }
}

impl<'a> Worker<'a> {
    fn new(plan: &'a Plan) -> Self {
        let lanes = plan.lane_policies.len();
        Worker {
            plan,
            keys: (0..lanes).map(|_| HashMap::default()).collect(),
            lane_requests: vec![0; lanes],
            refused: vec![0; plan.policies],
            routes: Vec::new(),
            hour_index: HashMap::new(),
            hours: Vec::new(),
        }
    }

    fn run(mut self, rx: Receiver<Batch>) -> WorkerOut {
        let mut last_hour = (u64::MAX, 0);
        for batch in rx {
            let mut start = 0;
            for i in 0..batch.len() {
                let end = batch.key_end[i] as usize;
                let key = &batch.keys[start..end];
                start = end;
                let hour = batch.t[i] / HOUR_NS;
                if hour != last_hour.0 {
                    last_hour = (hour, self.hour(hour));
                }
                self.decide(
                    batch.lane[i] as usize,
                    key,
                    batch.t[i],
                    batch.cost[i],
                    batch.route[i] as usize,
                    last_hour.1,
                );
            }
        }
        self.finish()
    }

    fn hour(&mut self, hour: u64) -> usize {
        if let Some(&i) = self.hour_index.get(&hour) {
            return i;
        }
        self.hours.push((hour, bucket(self.plan)));
        self.hour_index.insert(hour, self.hours.len() - 1);
        self.hours.len() - 1
    }

    fn decide(&mut self, lane: usize, key: &[u8], t: u64, cost: u64, route: usize, hour: usize) {
        let plan = self.plan;
        let limits = &plan.lane_limits[lane];
        let slot = match self.keys[lane].get_mut(key) {
            Some(slot) => slot,
            None => self.keys[lane].entry(key.into()).or_insert_with(|| Slot {
                volume: 0,
                clock: t,
                minute: t / MINUTE_NS,
                minute_requests: 0,
                states: limits
                    .iter()
                    .map(|l| State::new(l.algorithm, &l.quota))
                    .collect(),
                policies: vec![KeyPolicy::default(); plan.lane_ranges[lane].len()].into(),
            }),
        };
        slot.clock = slot.clock.max(t);
        let minute = slot.clock / MINUTE_NS;
        if minute != slot.minute {
            slot.close_minute();
            slot.minute = minute;
        }
        slot.volume += 1;
        slot.minute_requests += 1;
        self.lane_requests[lane] += 1;
        if self.routes.len() <= route {
            self.routes.resize_with(route + 1, || bucket(plan));
        }
        self.routes[route].requests[lane] += 1;
        self.hours[hour].1.requests[lane] += 1;
        for (j, range) in plan.lane_ranges[lane].iter().enumerate() {
            let d = decide_all(
                &mut slot.states[range.clone()],
                &limits[range.clone()],
                t,
                cost,
            );
            if !d.allowed {
                let p = plan.lane_policies[lane][j];
                let k = &mut slot.policies[j];
                k.refused += 1;
                k.minute_refused += 1;
                self.refused[p] += 1;
                self.routes[route].refused[p] += 1;
                self.hours[hour].1.refused[p] += 1;
            }
        }
    }

    fn finish(self) -> WorkerOut {
        let keys = self
            .keys
            .into_iter()
            .map(|lane| {
                lane.into_iter()
                    .map(|(key, mut slot)| {
                        slot.close_minute();
                        KeyOutcome {
                            key,
                            volume: slot.volume,
                            policies: slot.policies.into_vec(),
                        }
                    })
                    .collect()
            })
            .collect();
        WorkerOut {
            keys,
            lane_requests: self.lane_requests,
            refused: self.refused,
            routes: self.routes,
            hours: self.hours,
        }
    }
}

fn add(into: &mut Bucket, from: &Bucket) {
    into.requests
        .iter_mut()
        .zip(&from.requests)
        .for_each(|(a, b)| *a += b);
    into.refused
        .iter_mut()
        .zip(&from.refused)
        .for_each(|(a, b)| *a += b);
}

fn merge(plan: &Plan, outcome: &mut Outcome, route_names: Vec<String>, results: Vec<WorkerOut>) {
    let lanes = plan.lane_policies.len();
    outcome.lanes.resize(lanes, LaneOutcome::default());
    outcome.refused = vec![0; plan.policies];
    let mut routes: Vec<Bucket> = route_names.iter().map(|_| bucket(plan)).collect();
    let mut hours: std::collections::BTreeMap<u64, Bucket> = Default::default();
    for r in results {
        for (lane, keys) in r.keys.into_iter().enumerate() {
            outcome.lanes[lane].keys.extend(keys);
            outcome.lanes[lane].requests += r.lane_requests[lane];
        }
        outcome
            .refused
            .iter_mut()
            .zip(&r.refused)
            .for_each(|(a, b)| *a += b);
        for (i, b) in r.routes.iter().enumerate() {
            add(&mut routes[i], b);
        }
        for (hour, b) in &r.hours {
            add(hours.entry(*hour).or_insert_with(|| bucket(plan)), b);
        }
    }
    for (lane, out) in outcome.lanes.iter_mut().enumerate() {
        out.policies = plan.lane_policies[lane].clone();
        out.keys
            .sort_unstable_by(|a, b| b.volume.cmp(&a.volume).then_with(|| a.key.cmp(&b.key)));
    }
    let mut named: Vec<(String, Bucket)> = route_names
        .into_iter()
        .zip(routes)
        .filter(|(_, b)| b.requests.iter().any(|&n| n > 0))
        .collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    outcome.routes = named;
    outcome.hours = hours.into_iter().collect();
}
