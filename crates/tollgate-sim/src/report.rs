//! The results of a simulation as data (serialised to `report.json`) and as
//! text: the terminal summary and `report.md`.
//!
//! Everything here is deterministic: no timestamps, scenarios in the order
//! asked, rows in lane order, floats printed with fixed precision.

use serde::Serialize;
use tollgate_core::Quota;

use crate::metrics::{worst_span, WaitStats};
use crate::run::{Lane, Outcome};
use crate::scenarios::retry_storm::StormReport;
use crate::scenarios::{
    accuracy::AccuracyReport, batching::BatchingReport, equivalence::PatternRow,
};
use crate::table::Table;

const S: u64 = 1_000_000_000;

/// One rule's results on one scenario.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// e.g. `token_bucket (burst 20)`.
    pub label: String,
    /// The algorithm's canonical name.
    pub algorithm: &'static str,
    /// The quota's limit.
    pub limit: u64,
    /// The quota's period, ns.
    pub period_ns: u64,
    /// The burst, for the algorithms that use one.
    pub burst: Option<u64>,
    /// Requests sent.
    pub requests: u64,
    /// Requests admitted.
    pub admitted: u64,
    /// Requests refused.
    pub rejected: u64,
    /// Most admitted cost in any 1 s span.
    pub worst_1s: u64,
    /// Most admitted cost in any 60 s span.
    pub worst_60s: u64,
    /// Most admitted cost in any span of the quota's period.
    pub worst_period: u64,
    /// `worst_period - limit`: how far past its limit the rule let a client go.
    pub overshoot: i64,
    /// Largest per-key state seen, bytes (`State::memory_bytes`).
    pub state_bytes: usize,
    /// For the leaky queue: spans count releases (what the protected service
    /// sees), and how long admitted requests waited.
    pub waits: Option<WaitStats>,
}

impl Row {
    /// Measures `outcome` of `lane`.
    pub fn measure(lane: &Lane, outcome: &Outcome) -> Self {
        let quota: &Quota = &lane.limit.quota;
        let algorithm = lane.limit.algorithm;
        let seen = &outcome.released;
        let worst_period = worst_span(seen, quota.period_ns());
        Row {
            label: lane.label(),
            algorithm: algorithm.name(),
            limit: quota.limit(),
            period_ns: quota.period_ns(),
            burst: algorithm.uses_burst().then(|| quota.burst()),
            requests: outcome.requests,
            admitted: outcome.admitted_cost(),
            rejected: outcome.rejected(),
            worst_1s: worst_span(seen, S),
            worst_60s: worst_span(seen, 60 * S),
            worst_period,
            overshoot: worst_period as i64 - quota.limit() as i64,
            state_bytes: outcome.max_state_bytes,
            waits: (algorithm == tollgate_core::Algorithm::LeakyQueue)
                .then(|| WaitStats::of(&outcome.waits)),
        }
    }
}

/// Admitted per group of requests for one rule.
#[derive(Clone, Debug, Serialize)]
pub struct GroupRow {
    /// The rule's label.
    pub label: String,
    /// Admitted cost per group, in group order.
    pub admitted: Vec<u64>,
}

impl GroupRow {
    /// Counts the admitted requests of `outcome` in each index range of the
    /// trace (all requests cost 1 in the scenarios that use groups).
    pub fn count(lane: &Lane, outcome: &Outcome, groups: &[std::ops::Range<usize>]) -> Self {
        GroupRow {
            label: lane.label(),
            admitted: groups
                .iter()
                .map(|g| outcome.verdicts[g.clone()].iter().filter(|v| **v).count() as u64)
                .collect(),
        }
    }
}

/// A published figure next to ours.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// What is measured.
    pub figure: String,
    /// The seed's number, as published.
    pub seed: String,
    /// Ours.
    pub ours: String,
    /// Whether ours matches (or keeps the published bound).
    pub reproduced: bool,
    /// Why ours differs (empty when reproduced).
    pub why: String,
}

impl Check {
    /// Ours must equal the seed's number.
    pub fn equal(figure: impl Into<String>, seed: u64, ours: u64, why: &str) -> Self {
        Self::judged(
            figure,
            seed.to_string(),
            ours.to_string(),
            seed == ours,
            why,
        )
    }

    /// Ours must be at most the seed's bound.
    pub fn at_most(figure: impl Into<String>, bound: u64, ours: u64, why: &str) -> Self {
        Self::judged(
            figure,
            format!("<= {bound}"),
            ours.to_string(),
            ours <= bound,
            why,
        )
    }

    /// A comparison already judged by the caller (e.g. on percentages).
    pub fn judged(
        figure: impl Into<String>,
        seed: String,
        ours: String,
        reproduced: bool,
        why: &str,
    ) -> Self {
        Check {
            figure: figure.into(),
            seed,
            ours,
            reproduced,
            why: if reproduced {
                String::new()
            } else {
                why.to_string()
            },
        }
    }
}

/// Scenario-specific results beyond the per-rule rows.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Details {
    /// Nothing more.
    None,
    /// Admitted per group of requests (a batch, an attack) per rule.
    Groups {
        /// What each group is, e.g. `100 at 59.5 s`.
        groups: Vec<String>,
        /// One row per rule.
        rows: Vec<GroupRow>,
    },
    /// The bucket family compared decision by decision.
    Equivalence {
        /// Decisions compared (requests, each decided by all three).
        decisions: u64,
        /// Decisions on which any field differed.
        disagreements: u64,
        /// One row per traffic pattern.
        patterns: Vec<PatternRow>,
    },
    /// The many-keys accuracy study.
    Accuracy(AccuracyReport),
    /// Store load and overshoot per batch size.
    Batching(BatchingReport),
    /// Retry strategies against a server whose capacity dips.
    RetryStorm(StormReport),
}

/// Everything one scenario found.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioReport {
    /// The name passed on the command line.
    pub name: &'static str,
    /// A one-line title.
    pub title: String,
    /// Which seed article it reproduces.
    pub source: &'static str,
    /// The traffic, in words.
    pub traffic: String,
    /// Requests sent (per rule).
    pub requests: u64,
    /// One row per rule.
    pub rows: Vec<Row>,
    /// Scenario-specific results.
    pub details: Details,
    /// Published figures next to ours.
    pub checks: Vec<Check>,
    /// What a reader needs to interpret the numbers.
    pub notes: Vec<String>,
    /// Chart files written for this scenario (stems, without extension).
    pub charts: Vec<String>,
}

/// A whole run of `tollgate simulate`.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The scenarios, in the order they ran.
    pub scenarios: Vec<ScenarioReport>,
}

impl Report {
    /// Checks reproduced and checks in all.
    pub fn tally(&self) -> (usize, usize) {
        let all = self.scenarios.iter().flat_map(|s| &s.checks);
        let (ok, n) = all.fold((0, 0), |(ok, n), c| (ok + c.reproduced as usize, n + 1));
        (ok, n)
    }

    /// `report.json`: pretty-printed, keys in declaration order.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("reports serialise");
        s.push('\n');
        s
    }

    /// The terminal summary: per scenario its table and its checks.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for s in &self.scenarios {
            out.push_str(&format!("== {}: {} ({})\n", s.name, s.title, s.source));
            out.push_str(&format!("   {}\n\n", s.traffic));
            for t in tables(s) {
                out.push_str(&t.to_text());
                out.push('\n');
            }
            for c in &s.checks {
                let mark = if c.reproduced { "ok  " } else { "DIFF" };
                out.push_str(&format!(
                    "  [{mark}] {}: seed {}, ours {}\n",
                    c.figure, c.seed, c.ours
                ));
            }
            out.push('\n');
        }
        let (ok, n) = self.tally();
        out.push_str(&format!(
            "{ok} of {n} published figures reproduced; report.md explains the others.\n"
        ));
        out
    }

    /// `report.md`, linking the charts in `dir`-relative paths.
    pub fn to_markdown(&self) -> String {
        let (ok, n) = self.tally();
        let mut out = String::from("# tollgate simulate\n\n");
        out.push_str(&format!(
            "Every decision below was made by `tollgate-core`, with the exact semantics of \
             docs/SEMANTICS.md. {ok} of {n} published figures are reproduced; each one that is not \
             says why.\n\n\
             Columns: *admitted* requests; *worst 1 s* / *worst 60 s*: the most admitted in \
             any half-open span of that length, found exactly; *overshoot*: the worst span of \
             the quota's own period minus its limit; *state*: the largest per-key state in \
             bytes. For the leaky queue the spans count releases (what the protected service \
             sees), not arrivals.\n\n"
        ));
        for s in &self.scenarios {
            out.push_str(&format!("## `{}`: {}\n\n", s.name, s.title));
            out.push_str(&format!("Source: {}. Traffic: {}\n\n", s.source, s.traffic));
            for t in tables(s) {
                out.push_str(&t.to_markdown());
                out.push('\n');
            }
            if !s.checks.is_empty() {
                let mut t = Table::new(["published figure", "seed", "ours", "", "why it differs"]);
                for c in &s.checks {
                    let verdict = if c.reproduced {
                        "reproduced"
                    } else {
                        "differs"
                    };
                    t.row([
                        c.figure.clone(),
                        c.seed.clone(),
                        c.ours.clone(),
                        verdict.into(),
                        c.why.clone(),
                    ]);
                }
                out.push_str(&t.to_markdown());
                out.push('\n');
            }
            for n in &s.notes {
                out.push_str(&format!("- {n}\n"));
            }
            if !s.notes.is_empty() {
                out.push('\n');
            }
            for c in &s.charts {
                out.push_str(&format!("![{c}]({c}.png) ([SVG]({c}.svg))\n\n"));
            }
        }
        out
    }
}

/// The tables shown for a scenario: its rows, then its details.
fn tables(s: &ScenarioReport) -> Vec<Table> {
    let mut out = Vec::new();
    if !s.rows.is_empty() {
        out.push(rows_table(&s.rows));
    }
    match &s.details {
        Details::None => {}
        Details::Groups { groups, rows } => {
            let headers = std::iter::once("admitted of".to_string()).chain(groups.iter().cloned());
            let mut t = Table::new(headers);
            for r in rows {
                t.row(
                    std::iter::once(r.label.clone()).chain(r.admitted.iter().map(u64::to_string)),
                );
            }
            out.push(t);
        }
        Details::Equivalence {
            decisions,
            disagreements,
            patterns,
        } => {
            let mut t = Table::new(["pattern", "quota", "decisions", "disagreements"]);
            for p in patterns {
                t.row([
                    p.name.clone(),
                    p.quota.clone(),
                    p.decisions.to_string(),
                    p.disagreements.to_string(),
                ]);
            }
            t.row([
                format!("all {} patterns", patterns.len()),
                String::new(),
                decisions.to_string(),
                disagreements.to_string(),
            ]);
            out.push(t);
        }
        Details::Accuracy(a) => out.extend(a.tables()),
        Details::Batching(b) => out.extend(b.tables()),
        Details::RetryStorm(r) => out.extend(r.tables()),
    }
    out
}

fn rows_table(rows: &[Row]) -> Table {
    let mut t = Table::new([
        "algorithm",
        "admitted",
        "worst 1 s",
        "worst 60 s",
        "overshoot",
        "state (B/key)",
        "waits max / p50 / p99",
    ]);
    for r in rows {
        let per = if r.period_ns == 60 * S {
            "min".to_string()
        } else {
            seconds(r.period_ns)
        };
        let overshoot = format!(
            "{:+} vs {}/{}",
            r.overshoot,
            r.limit,
            per.trim_start_matches("1 ")
        );
        let waits = r.waits.map_or(String::new(), |w| {
            format!(
                "{} / {} / {}",
                seconds(w.max_ns),
                seconds(w.p50_ns),
                seconds(w.p99_ns)
            )
        });
        t.row([
            r.label.clone(),
            format!("{} of {}", r.admitted, r.requests),
            r.worst_1s.to_string(),
            r.worst_60s.to_string(),
            overshoot,
            r.state_bytes.to_string(),
            waits,
        ]);
    }
    t
}

/// Nanoseconds as seconds with up to three decimals: `59.5 s`, `12 s`.
pub fn seconds(ns: u64) -> String {
    let whole = ns / S;
    let ms = (ns % S) / 1_000_000;
    if ms == 0 {
        format!("{whole} s")
    } else {
        let frac = format!("{ms:03}");
        format!("{whole}.{} s", frac.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_formatting() {
        assert_eq!(seconds(59_500_000_000), "59.5 s");
        assert_eq!(seconds(12 * S), "12 s");
        assert_eq!(seconds(600_000_000), "0.6 s");
        assert_eq!(seconds(60_495_000_000), "60.495 s");
    }
}
