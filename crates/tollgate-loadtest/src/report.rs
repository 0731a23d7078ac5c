//! What a load test found, as data (`report.json`), as text (the terminal
//! and `report.md`) and as charts (the simulator's style).

use std::collections::BTreeMap;

use serde::Serialize;
use tollgate_core::Limit;
use tollgate_sim::charts::{Chart, Panel, Reference, Series};
use tollgate_sim::metrics::{worst_span, Charge};
use tollgate_sim::table::Table;

use crate::bound::most_admitted;
use crate::client::Failure;
use crate::config::{Behaviour, Config};
use crate::run::{Outcome, Record};
use crate::schedule::Kind;

const S: u64 = 1_000_000_000;
/// Clients listed by name in the tables and the chart (the worst first).
const CLIENT_ROWS: usize = 20;

/// A labelled row of the requests table: the label and its value per run.
type Line = (String, Box<dyn Fn(&RunReport) -> String>);

/// Latency percentiles, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Requests measured.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// The slowest.
    pub max_ms: f64,
}

impl Percentiles {
    /// Of durations in ns (3 significant digits, HdrHistogram).
    pub fn of(values: impl IntoIterator<Item = u64>) -> Self {
        // 1 ns to one hour, 3 significant digits; longer is recorded as an
        // hour (no request outlives its timeout by that much).
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600 * S, 3)
            .expect("valid histogram bounds");
        let mut max = 0;
        for v in values {
            h.saturating_record(v.max(1));
            max = max.max(v);
        }
        if h.is_empty() {
            return Percentiles::default();
        }
        let ms = |ns: u64| (ns as f64 / 1e6 * 1000.0).round() / 1000.0;
        Percentiles {
            count: h.len(),
            p50_ms: ms(h.value_at_quantile(0.50)),
            p90_ms: ms(h.value_at_quantile(0.90)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            max_ms: ms(max),
        }
    }
}

/// Answers by status class, and failures by kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Statuses {
    /// 2xx: admitted.
    pub ok: u64,
    /// 429: refused by the limiter.
    pub too_many: u64,
    /// 413: a cost that can never fit.
    pub too_large: u64,
    /// 503: unavailable (a store failing closed, a full listener).
    pub unavailable: u64,
    /// Any other status.
    pub other: u64,
    /// No HTTP answer, by kind.
    pub errors: BTreeMap<Failure, u64>,
}

impl Statuses {
    /// All failures.
    pub fn error_total(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// How good the refusals were.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Refusals {
    /// 429 answers.
    pub count: u64,
    /// With a `Retry-After` in delta-seconds.
    pub retry_after_valid: u64,
    /// With a valid `RateLimit` field.
    pub ratelimit_valid: u64,
    /// With a valid `RateLimit-Policy` field.
    pub policy_valid: u64,
    /// Retries sent at the time `Retry-After` named.
    pub retries_at_retry_after: u64,
    /// Of those, with nothing else of the client's in flight (they must be
    /// admitted).
    pub clean_retries: u64,
    /// Of the clean ones, admitted.
    pub clean_admitted: u64,
}

/// One run against one URL.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    /// The URL.
    pub url: String,
    /// From the start to the last answer, seconds.
    pub elapsed_s: f64,
    /// Scheduled arrivals.
    pub offered: u64,
    /// Requests sent, retries included.
    pub sent: u64,
    /// Retries sent.
    pub retries: u64,
    /// Arrivals dropped: every connection was busy at their time.
    pub dropped: u64,
    /// Arrivals withheld by clients honouring `Retry-After`.
    pub withheld: u64,
    /// Refusals not retried (out of retries, or no `Retry-After`).
    pub gave_up: u64,
    /// Retries that would have been due after the end.
    pub retries_past_end: u64,
    /// Answers and failures.
    pub statuses: Statuses,
    /// The 429s' fields and retries.
    pub refusals: Refusals,
    /// Latency of 2xx answers.
    pub admitted: Percentiles,
    /// Latency of 429 answers.
    pub refused: Percentiles,
    /// How late requests went out after their scheduled time (open loop).
    pub send_lag: Percentiles,
    /// `[admitted, refused, other answers and errors]` per second, by the
    /// time the answer came.
    pub per_second: Vec<[u64; 3]>,
}

impl RunReport {
    /// Summarises one run.
    pub fn of(url: &str, outcome: &Outcome) -> Self {
        let mut st = Statuses::default();
        let mut rf = Refusals::default();
        let mut admitted = Vec::new();
        let mut refused = Vec::new();
        let seconds = outcome.elapsed_ns.div_ceil(S).max(1) as usize;
        let mut per_second = vec![[0u64; 3]; seconds];
        for r in &outcome.records {
            let latency = r.done_ns - r.sent_ns;
            let column = match r.outcome {
                Ok(a) => match a.status {
                    200..=299 => {
                        st.ok += 1;
                        admitted.push(latency);
                        0
                    }
                    429 => {
                        st.too_many += 1;
                        refused.push(latency);
                        rf.count += 1;
                        rf.retry_after_valid += u64::from(a.retry_after.is_some());
                        rf.ratelimit_valid += u64::from(a.ratelimit);
                        rf.policy_valid += u64::from(a.policy);
                        1
                    }
                    413 => {
                        st.too_large += 1;
                        2
                    }
                    503 => {
                        st.unavailable += 1;
                        2
                    }
                    _ => {
                        st.other += 1;
                        2
                    }
                },
                Err(f) => {
                    *st.errors.entry(f).or_default() += 1;
                    2
                }
            };
            if let Some(bin) = per_second.get_mut((r.done_ns / S) as usize) {
                bin[column] += 1;
            }
            if let Kind::Retry {
                at_retry_after: true,
                clean,
                ..
            } = r.kind
            {
                rf.retries_at_retry_after += 1;
                if clean {
                    rf.clean_retries += 1;
                    rf.clean_admitted += u64::from(admitted_answer(r));
                }
            }
        }
        let u = &outcome.unsent;
        RunReport {
            url: url.to_string(),
            elapsed_s: round3(outcome.elapsed_ns as f64 / 1e9),
            offered: u.offered,
            sent: outcome.records.len() as u64,
            retries: outcome
                .records
                .iter()
                .filter(|r| r.kind != Kind::Scheduled)
                .count() as u64,
            dropped: u.dropped,
            withheld: u.withheld,
            gave_up: u.gave_up,
            retries_past_end: u.retries_past_end,
            statuses: st,
            refusals: rf,
            admitted: Percentiles::of(admitted),
            refused: Percentiles::of(refused),
            send_lag: Percentiles::of(
                outcome
                    .records
                    .iter()
                    .map(|r| r.sent_ns.saturating_sub(r.due_ns)),
            ),
            per_second,
        }
    }

    /// Requests answered (with any status) per second of the run: a
    /// request that got no answer (an error) is not counted.
    pub fn rate(&self) -> f64 {
        if self.elapsed_s > 0.0 {
            let answered = self.sent.saturating_sub(self.statuses.error_total());
            answered as f64 / self.elapsed_s
        } else {
            0.0
        }
    }
}

fn admitted_answer(r: &Record) -> bool {
    matches!(r.outcome, Ok(a) if (200..300).contains(&a.status))
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// The policy, as the report shows it.
#[derive(Clone, Debug, Serialize)]
pub struct PolicyInfo {
    /// The algorithm's name.
    pub algorithm: &'static str,
    /// Per period.
    pub limit: u64,
    /// The period, ns.
    pub period_ns: u64,
    /// The burst (bucket family and queue).
    pub burst: Option<u64>,
    /// The most admitted in any span of one period.
    pub allowed_period: u64,
    /// The most admitted in any span of one second.
    pub allowed_1s: u64,
}

impl PolicyInfo {
    fn of(limit: &Limit) -> Self {
        PolicyInfo {
            algorithm: limit.algorithm.name(),
            limit: limit.quota.limit(),
            period_ns: limit.quota.period_ns(),
            burst: limit.algorithm.uses_burst().then(|| limit.quota.burst()),
            allowed_period: most_admitted(limit, limit.quota.period_ns()),
            allowed_1s: most_admitted(limit, S),
        }
    }

    /// `token_bucket 100/60s burst 20`.
    pub fn phrase(&self) -> String {
        let mut s = format!(
            "{} {}/{}",
            self.algorithm,
            self.limit,
            span_words(self.period_ns)
        );
        if let Some(b) = self.burst {
            s.push_str(&format!(" burst {b}"));
        }
        s
    }
}

/// `60s`, `1.5s`, `250ms`.
fn span_words(ns: u64) -> String {
    if ns % S == 0 {
        format!("{}s", ns / S)
    } else if ns >= S {
        format!("{}s", ns as f64 / 1e9)
    } else {
        format!("{}ms", ns as f64 / 1e6)
    }
}

/// One client's peak against what the policy allows.
#[derive(Clone, Debug, Serialize)]
pub struct ClientRow {
    /// Its number.
    pub client: u32,
    /// Its key.
    pub key: String,
    /// What it does with a 429.
    pub behaviour: Behaviour,
    /// Requests sent.
    pub sent: u64,
    /// 2xx answers.
    pub admitted: u64,
    /// Most admitted in any 1 s span, by the time the answers came.
    pub worst_1s: u64,
    /// Most admitted in any span of the policy's period.
    pub worst_period: u64,
    /// How far past what the policy allows in either span (0: within).
    pub overshoot: u64,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Clients.
    pub clients: u32,
    /// Requests per second per client (`None`: closed loop).
    pub rate_per_client: Option<f64>,
    /// `constant` or `poisson`.
    pub arrivals: crate::config::Arrivals,
    /// The duration bound, seconds.
    pub duration_s: Option<f64>,
    /// The count bound.
    pub max_requests: Option<u64>,
    /// Connections at most.
    pub connections: usize,
    /// Seed of the random draws.
    pub seed: u64,
    /// Clients per behaviour.
    pub behaviours: BTreeMap<Behaviour, u32>,
    /// The policy the target enforces.
    pub policy: Option<PolicyInfo>,
    /// The run through the limiter.
    pub target: RunReport,
    /// The run without it.
    pub baseline: Option<RunReport>,
    /// Per client, the worst first.
    pub overshoot: Vec<ClientRow>,
    /// Clients whose peak passed what the policy allows.
    pub clients_over: u64,
    /// What a reader needs to interpret the numbers.
    pub notes: Vec<String>,
    /// Chart files (stems).
    pub charts: Vec<String>,
}

impl Report {
    /// Builds the report of a run (and its baseline).
    pub fn new(
        config: &Config,
        rate: Option<f64>,
        target: &Outcome,
        baseline: Option<&Outcome>,
    ) -> Self {
        let policy = config.policy.as_ref().map(PolicyInfo::of);
        let behaviours = config.mix.assign(config.clients);
        let mut counts = BTreeMap::new();
        for b in &behaviours {
            *counts.entry(*b).or_insert(0) += 1;
        }
        let overshoot = overshoot(config, &behaviours, target, policy.as_ref());
        let clients_over = overshoot.iter().filter(|r| r.overshoot > 0).count() as u64;
        let mut report = Report {
            clients: config.clients,
            rate_per_client: rate.map(round3),
            arrivals: config.arrivals,
            duration_s: config.duration.map(|d| d.as_secs_f64()),
            max_requests: config.requests,
            connections: config.connections,
            seed: config.seed,
            behaviours: counts,
            policy,
            target: RunReport::of(&config.url, target),
            baseline: baseline.map(|b| RunReport::of(config.baseline.as_deref().unwrap_or(""), b)),
            overshoot,
            clients_over,
            notes: Vec::new(),
            charts: vec!["loadtest-timeline".into(), "loadtest-latency".into()],
        };
        if report.policy.is_some() {
            report.charts.push("loadtest-overshoot".into());
        }
        report.notes = notes(&report);
        report
    }

    /// `report.json`: pretty-printed, keys in declaration order.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("reports serialise");
        s.push('\n');
        s
    }

    /// The terminal summary.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "tollgate loadtest {}\n  {}\n\n",
            self.target.url,
            self.setup()
        );
        for (title, table) in self.tables() {
            out.push_str(&format!("{title}\n"));
            out.push_str(&table.to_text());
            out.push('\n');
        }
        for n in &self.notes {
            out.push_str(&format!("- {n}\n"));
        }
        out
    }

    /// `report.md`, with the charts.
    pub fn to_markdown(&self) -> String {
        let mut out = format!(
            "# tollgate loadtest\n\n`{}`: {}\n\n",
            self.target.url,
            self.setup()
        );
        for (title, table) in self.tables() {
            out.push_str(&format!("## {title}\n\n{}\n", table.to_markdown()));
        }
        if !self.notes.is_empty() {
            out.push_str("## Notes\n\n");
            for n in &self.notes {
                out.push_str(&format!("- {n}\n"));
            }
            out.push('\n');
        }
        for c in &self.charts {
            out.push_str(&format!("![{c}]({c}.svg)\n\n"));
        }
        out
    }

    /// One line: clients, rate, arrivals, bounds.
    fn setup(&self) -> String {
        let rate = match (self.rate_per_client, &self.policy) {
            (None, _) => "closed loop (as fast as answers come)".to_string(),
            (Some(r), Some(p)) => format!(
                "{r}/s each ({:.2}x {})",
                r / (p.limit as f64 * 1e9 / p.period_ns as f64),
                p.phrase()
            ),
            (Some(r), None) => format!("{r}/s each"),
        };
        let mut bounds = Vec::new();
        if let Some(d) = self.duration_s {
            bounds.push(format!("{d} s"));
        }
        if let Some(n) = self.max_requests {
            bounds.push(format!("{n} requests"));
        }
        let behaviours: Vec<String> = self
            .behaviours
            .iter()
            .map(|(b, n)| format!("{b} {n}"))
            .collect();
        let arrivals = match self.arrivals {
            crate::config::Arrivals::Constant => "constant",
            crate::config::Arrivals::Poisson => "poisson",
        };
        format!(
            "{} clients at {rate}, {arrivals} arrivals, at most {}, {} connections, seed {}; behaviours: {}",
            self.clients,
            bounds.join(" or "),
            self.connections,
            self.seed,
            behaviours.join(", ")
        )
    }

    fn runs(&self) -> Vec<(&'static str, &RunReport)> {
        // Without a policy nothing says the target limits anything.
        let label = if self.policy.is_some() {
            "limiter"
        } else {
            "target"
        };
        let mut runs = vec![(label, &self.target)];
        if let Some(b) = &self.baseline {
            runs.push(("baseline", b));
        }
        runs
    }

    fn tables(&self) -> Vec<(String, Table)> {
        let runs = self.runs();
        let mut requests = Table::new(
            std::iter::once("requests".to_string()).chain(runs.iter().map(|r| r.0.to_string())),
        );
        let failure_names: Vec<Failure> = runs
            .iter()
            .flat_map(|r| r.1.statuses.errors.keys().copied())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut lines: Vec<Line> = vec![
            (
                "offered (scheduled)".into(),
                Box::new(|r| r.offered.to_string()),
            ),
            (
                "sent (retries included)".into(),
                Box::new(|r| r.sent.to_string()),
            ),
            (
                "  of which retries".into(),
                Box::new(|r| r.retries.to_string()),
            ),
            (
                "dropped: no free connection".into(),
                Box::new(|r| r.dropped.to_string()),
            ),
            (
                "withheld: honouring Retry-After".into(),
                Box::new(|r| r.withheld.to_string()),
            ),
            (
                "answered per second".into(),
                Box::new(|r| format!("{:.1}", r.rate())),
            ),
            ("2xx".into(), Box::new(|r| r.statuses.ok.to_string())),
            ("429".into(), Box::new(|r| r.statuses.too_many.to_string())),
            ("413".into(), Box::new(|r| r.statuses.too_large.to_string())),
            (
                "503".into(),
                Box::new(|r| r.statuses.unavailable.to_string()),
            ),
            (
                "other status".into(),
                Box::new(|r| r.statuses.other.to_string()),
            ),
            (
                "errors".into(),
                Box::new(|r| r.statuses.error_total().to_string()),
            ),
        ];
        for f in failure_names {
            lines.push((
                format!("  {}", f.name()),
                Box::new(move |r| r.statuses.errors.get(&f).copied().unwrap_or(0).to_string()),
            ));
        }
        for (label, value) in &lines {
            requests.row(std::iter::once(label.clone()).chain(runs.iter().map(|r| value(r.1))));
        }
        let mut tables = vec![("Requests".to_string(), requests)];

        let rf = &self.target.refusals;
        let mut refusals = Table::new(["429 answers", "count", "share"]);
        let share = |n: u64, of: u64| {
            if of == 0 {
                "-".to_string()
            } else {
                format!("{:.1}%", n as f64 * 100.0 / of as f64)
            }
        };
        for (label, n, of) in [
            ("all", rf.count, rf.count),
            (
                "valid Retry-After (delta-seconds)",
                rf.retry_after_valid,
                rf.count,
            ),
            ("valid RateLimit", rf.ratelimit_valid, rf.count),
            ("valid RateLimit-Policy", rf.policy_valid, rf.count),
            (
                "retries sent at Retry-After",
                rf.retries_at_retry_after,
                rf.retries_at_retry_after,
            ),
            (
                "  with nothing else in flight",
                rf.clean_retries,
                rf.retries_at_retry_after,
            ),
            (
                "  of those, admitted (must be all)",
                rf.clean_admitted,
                rf.clean_retries,
            ),
        ] {
            refusals.row([label.to_string(), n.to_string(), share(n, of)]);
        }
        tables.push(("Refusals".to_string(), refusals));

        let mut latency = Table::new(["latency (ms)", "count", "p50", "p90", "p99", "max"]);
        let row = |t: &mut Table, label: String, p: &Percentiles| {
            t.row([
                label,
                p.count.to_string(),
                format!("{:.3}", p.p50_ms),
                format!("{:.3}", p.p90_ms),
                format!("{:.3}", p.p99_ms),
                format!("{:.3}", p.max_ms),
            ])
        };
        for (name, r) in &runs {
            row(&mut latency, format!("{name}: 2xx"), &r.admitted);
            if r.refused.count > 0 {
                row(&mut latency, format!("{name}: 429"), &r.refused);
            }
        }
        if let Some(b) = &self.baseline {
            let (a, z) = (&self.target.admitted, &b.admitted);
            latency.row([
                "limiter cost (2xx, limiter - baseline)".to_string(),
                String::new(),
                format!("{:+.3}", a.p50_ms - z.p50_ms),
                format!("{:+.3}", a.p90_ms - z.p90_ms),
                format!("{:+.3}", a.p99_ms - z.p99_ms),
                format!("{:+.3}", a.max_ms - z.max_ms),
            ]);
        }
        if self.rate_per_client.is_some() {
            row(
                &mut latency,
                "send lag (sent - due)".to_string(),
                &self.target.send_lag,
            );
        }
        tables.push(("Latency".to_string(), latency));

        if let Some(p) = &self.policy {
            // A policy of one second has one span to show, not the same twice.
            let one_span = p.period_ns == S;
            let mut head = vec![
                "client".to_string(),
                "behaviour".to_string(),
                "sent".to_string(),
                "2xx".to_string(),
                format!("most in 1s (allowed {})", p.allowed_1s),
            ];
            if !one_span {
                head.push(format!(
                    "most in {} (allowed {})",
                    span_words(p.period_ns),
                    p.allowed_period
                ));
            }
            head.push("over".to_string());
            let mut t = Table::new(head);
            for c in self.overshoot.iter().take(CLIENT_ROWS) {
                let mut row = vec![
                    c.key.clone(),
                    c.behaviour.to_string(),
                    c.sent.to_string(),
                    c.admitted.to_string(),
                    c.worst_1s.to_string(),
                ];
                if !one_span {
                    row.push(c.worst_period.to_string());
                }
                row.push(c.overshoot.to_string());
                t.row(row);
            }
            let title = format!(
                "Overshoot per client ({} of {} over; the worst {} shown)",
                self.clients_over,
                self.overshoot.len(),
                self.overshoot.len().min(CLIENT_ROWS)
            );
            tables.push((title, t));
        }
        tables
    }

    /// The charts: answers per second, latency, and each client's peak.
    pub fn charts(&self) -> Vec<Chart> {
        let mut charts = Vec::new();
        let series = |i: usize, label: &str| {
            Series::new(
                label,
                self.target
                    .per_second
                    .iter()
                    .enumerate()
                    .map(move |(s, bin)| (s as f64, bin[i] as f64)),
            )
        };
        let reference = self.policy.as_ref().map(|p| {
            let per_s = p.limit as f64 * 1e9 / p.period_ns as f64 * self.clients as f64;
            Reference::new(
                per_s,
                format!("policy's long-run rate, all clients ({per_s:.1}/s)"),
            )
        });
        charts.push(Chart {
            stem: "loadtest-timeline".into(),
            panel_height: 420,
            panels: vec![Panel::Lines {
                title: "Answers per second through the limiter".into(),
                x_label: "time since start (s)".into(),
                y_label: "answers per second".into(),
                log_y: false,
                y_max: None,
                series: vec![
                    series(0, "admitted (2xx)"),
                    series(1, "refused (429)"),
                    series(2, "other status or error"),
                ],
                reference,
            }],
        });
        let mut bars = Vec::new();
        for (name, r) in self.runs() {
            for (q, v) in [
                ("p50", r.admitted.p50_ms),
                ("p90", r.admitted.p90_ms),
                ("p99", r.admitted.p99_ms),
            ] {
                bars.push((format!("{name} 2xx {q}"), v));
            }
        }
        charts.push(Chart {
            stem: "loadtest-latency".into(),
            panel_height: 80 + 34 * bars.len() as u32,
            panels: vec![Panel::Bars {
                title: "Latency of admitted requests: the limiter's cost".into(),
                y_label: "milliseconds".into(),
                bars,
                reference: None,
            }],
        });
        if let Some(p) = &self.policy {
            let bars: Vec<(String, f64)> = self
                .overshoot
                .iter()
                .take(CLIENT_ROWS)
                .map(|c| {
                    (
                        format!("{} ({})", c.key, c.behaviour),
                        c.worst_period as f64,
                    )
                })
                .collect();
            charts.push(Chart {
                stem: "loadtest-overshoot".into(),
                panel_height: 80 + 30 * bars.len() as u32,
                panels: vec![Panel::Bars {
                    title: format!(
                        "Most admitted in any {} per client",
                        span_words(p.period_ns)
                    ),
                    y_label: "admitted requests".into(),
                    bars,
                    reference: Some(Reference::new(
                        p.allowed_period as f64,
                        format!("allowed by {}", p.phrase()),
                    )),
                }],
            });
        }
        charts
    }
}

/// Per client: peaks by the time answers came, worst first.
fn overshoot(
    config: &Config,
    behaviours: &[Behaviour],
    outcome: &Outcome,
    policy: Option<&PolicyInfo>,
) -> Vec<ClientRow> {
    let Some(policy) = policy else {
        return Vec::new();
    };
    let n = config.clients as usize;
    let mut sent = vec![0u64; n];
    let mut admitted: Vec<Vec<Charge>> = vec![Vec::new(); n];
    for r in &outcome.records {
        sent[r.client as usize] += 1;
        if admitted_answer(r) {
            admitted[r.client as usize].push(Charge {
                at: r.done_ns,
                cost: 1,
            });
        }
    }
    let mut rows: Vec<ClientRow> = admitted
        .iter_mut()
        .enumerate()
        .map(|(i, charges)| {
            charges.sort_unstable();
            let worst_1s = worst_span(charges, S);
            let worst_period = worst_span(charges, policy.period_ns);
            ClientRow {
                client: i as u32,
                key: config.key(i as u32),
                behaviour: behaviours[i],
                sent: sent[i],
                admitted: charges.len() as u64,
                worst_1s,
                worst_period,
                overshoot: worst_1s
                    .saturating_sub(policy.allowed_1s)
                    .max(worst_period.saturating_sub(policy.allowed_period)),
            }
        })
        .collect();
    rows.sort_by_key(|r| {
        (
            std::cmp::Reverse(r.overshoot),
            std::cmp::Reverse(r.worst_period),
            r.client,
        )
    });
    rows
}

fn notes(r: &Report) -> Vec<String> {
    let mut notes = Vec::new();
    let t = &r.target;
    if t.dropped > 0 {
        notes.push(format!(
            "{} scheduled requests were dropped because every connection was busy at their time: \
             the offered load was not fully sent (more --connections, or a faster server)",
            t.dropped
        ));
    }
    if let Some(p) = &r.policy {
        notes.push(format!(
            "Peaks are counted at the times the clients received the answers; {} allows at most {} \
             in any {} and {} in any 1 s (docs/SEMANTICS.md, Guarantees). Jitter in response times \
             can move an answer across a span's edge.",
            p.phrase(),
            p.allowed_period,
            span_words(p.period_ns),
            p.allowed_1s
        ));
    }
    let rf = &t.refusals;
    if rf.clean_retries > rf.clean_admitted {
        notes.push(format!(
            "{} retries sent exactly at Retry-After, with nothing else spending the key, were refused: \
             the Retry-After was too short",
            rf.clean_retries - rf.clean_admitted
        ));
    }
    if rf.count > rf.retry_after_valid {
        notes.push(format!(
            "{} of {} 429 answers had no valid Retry-After (delta-seconds)",
            rf.count - rf.retry_after_valid,
            rf.count
        ));
    }
    if t.statuses.error_total() > 0 {
        notes.push(format!(
            "{} requests got no HTTP answer (see errors by kind)",
            t.statuses.error_total()
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_nothing_and_of_some() {
        assert_eq!(Percentiles::of([]), Percentiles::default());
        let p = Percentiles::of((1..=1000).map(|ms| ms * 1_000_000));
        assert_eq!(p.count, 1000);
        assert!((p.p50_ms - 500.0).abs() < 1.0, "{p:?}");
        assert!((p.p99_ms - 990.0).abs() < 1.0, "{p:?}");
        assert_eq!(p.max_ms, 1000.0);
    }

    #[test]
    fn spans_in_words() {
        assert_eq!(span_words(60 * S), "60s");
        assert_eq!(span_words(1_500_000_000), "1.5s");
        assert_eq!(span_words(250_000_000), "250ms");
    }
}
