//! What a run found, per policy: a table for the terminal, `report.md`,
//! `report.json` and charts in the simulator's style.

use std::path::Path;

use serde::Serialize;
use tollgate_sim::charts::{Chart, Panel, Reference, Series};
use tollgate_sim::table::Table;
use tollgate_trace::escape::escape_controls;

use crate::engine::{MalformedLines, Outcome};
use crate::policy::{Candidates, SweepPoint};
use crate::time::utc_minute;

/// Keys listed among the most refused, per policy.
pub const TOP_REFUSED: usize = 10;
/// Routes listed per policy (most refused first).
pub const TOP_ROUTES: usize = 15;
const HOUR_NS: u64 = 3_600_000_000_000;
const MINUTE_NS: u64 = 60_000_000_000;

/// Requests and refusals of a group of keys.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Group {
    /// Keys in the group.
    pub keys: usize,
    /// Their requests.
    pub requests: u64,
    /// Their refused requests.
    pub refused: u64,
    /// `refused / requests` (0 when there are none).
    pub refused_share: f64,
}

impl Group {
    fn add(&mut self, requests: u64, refused: u64) {
        self.keys += 1;
        self.requests += requests;
        self.refused += refused;
        self.refused_share = share(self.refused, self.requests);
    }
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// A key among the most refused.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KeyRow {
    /// The key, control characters escaped.
    pub key: String,
    /// Its requests.
    pub requests: u64,
    /// Refused.
    pub refused: u64,
    /// The minute with the most refusals (UTC, by the key's clock).
    pub worst_minute: String,
    /// Requests in that minute.
    pub worst_minute_requests: u64,
    /// Refused in that minute.
    pub worst_minute_refused: u64,
}

/// Requests and refusals of a route or an hour.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// The route template, or the hour (UTC).
    pub name: String,
    /// Requests under the policy's rule.
    pub requests: u64,
    /// Refused.
    pub refused: u64,
}

/// One policy's findings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyReport {
    /// The policy in words.
    pub name: String,
    /// Its rule or key.
    pub applies_to: String,
    /// For a sweep: its limit and burst.
    pub point: Option<SweepPoint>,
    /// Requests decided.
    pub requests: u64,
    /// Requests refused.
    pub refused: u64,
    /// `refused / requests`.
    pub refused_share: f64,
    /// Requests without a key (the HTTP layer answers them 400).
    pub no_key: u64,
    /// Distinct keys.
    pub keys: usize,
    /// Keys refused at least once.
    pub keys_refused: usize,
    /// The busiest 1% of keys by volume (at least one key).
    pub top_1pct: Group,
    /// The ten busiest keys.
    pub top_10: Group,
    /// Every key outside the busiest 1%.
    pub others: Group,
    /// Routes, most refused first.
    pub by_route: Vec<Row>,
    /// Hours, in time order.
    pub by_hour: Vec<Row>,
    /// The keys refused most.
    pub top_refused_keys: Vec<KeyRow>,
}

/// One burst's curve of a sweep.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Curve {
    /// The burst (`None` for the windows).
    pub burst: Option<u64>,
    /// `(limit, refused share, refused share of the busiest 1% of keys)`,
    /// by limit.
    pub points: Vec<(u64, f64, f64)>,
}

/// A sweep's curves and the policy it recommends.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sweep {
    /// The largest refused share of the busiest 1% of keys accepted.
    pub target: f64,
    /// One curve per burst.
    pub curves: Vec<Curve>,
    /// The smallest policy (lowest limit, then burst) within the target.
    pub recommended: Option<String>,
}

/// Everything reported.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// Lines read.
    pub lines: u64,
    /// Lines not read, with samples.
    pub malformed: MalformedLines,
    /// The first and last request's minute (UTC).
    pub span: Option<(String, String)>,
    /// Per policy.
    pub policies: Vec<PolicyReport>,
    /// For a sweep.
    pub sweep: Option<Sweep>,
}

fn key_text(key: &[u8]) -> String {
    escape_controls(&String::from_utf8_lossy(key)).into_owned()
}

impl Report {
    /// The report of `outcome`; `target` is the sweep's accepted refused
    /// share of the busiest keys (0.001 for 0.1%).
    pub fn new(candidates: &Candidates, outcome: &Outcome, target: f64) -> Self {
        let mut policies = Vec::with_capacity(candidates.policies.len());
        for (p, c) in candidates.policies.iter().enumerate() {
            let lane = &outcome.lanes[c.lane];
            let j = lane
                .policies
                .iter()
                .position(|&q| q == p)
                .expect("every policy is in its lane");
            let top = lane.keys.len().div_ceil(100).max(1);
            let (mut top_1pct, mut top_10, mut others) =
                (Group::default(), Group::default(), Group::default());
            let mut keys_refused = 0;
            for (rank, k) in lane.keys.iter().enumerate() {
                let refused = k.policies[j].refused;
                keys_refused += usize::from(refused > 0);
                if rank < top {
                    top_1pct.add(k.volume, refused);
                } else {
                    others.add(k.volume, refused);
                }
                if rank < 10 {
                    top_10.add(k.volume, refused);
                }
            }
            let mut refused_keys: Vec<_> = lane
                .keys
                .iter()
                .filter(|k| k.policies[j].refused > 0)
                .collect();
            refused_keys.sort_by(|a, b| {
                b.policies[j]
                    .refused
                    .cmp(&a.policies[j].refused)
                    .then_with(|| a.key.cmp(&b.key))
            });
            let top_refused_keys = refused_keys
                .iter()
                .take(TOP_REFUSED)
                .map(|k| {
                    let kp = &k.policies[j];
                    KeyRow {
                        key: key_text(&k.key),
                        requests: k.volume,
                        refused: kp.refused,
                        worst_minute: utc_minute(kp.worst_minute * MINUTE_NS),
                        worst_minute_requests: kp.worst_requests,
                        worst_minute_refused: kp.worst_refused,
                    }
                })
                .collect();
            let mut by_route: Vec<Row> = outcome
                .routes
                .iter()
                .filter(|(_, b)| b.requests[c.lane] > 0)
                .map(|(name, b)| Row {
                    name: key_text(name.as_bytes()),
                    requests: b.requests[c.lane],
                    refused: b.refused[p],
                })
                .collect();
            by_route.sort_by(|a, b| {
                b.refused
                    .cmp(&a.refused)
                    .then(b.requests.cmp(&a.requests))
                    .then_with(|| a.name.cmp(&b.name))
            });
            by_route.truncate(TOP_ROUTES);
            let by_hour = outcome
                .hours
                .iter()
                .map(|(h, b)| Row {
                    name: utc_minute(h * HOUR_NS),
                    requests: b.requests[c.lane],
                    refused: b.refused[p],
                })
                .collect();
            policies.push(PolicyReport {
                name: c.name.clone(),
                applies_to: candidates.lanes[c.lane].name.clone(),
                point: c.point,
                requests: lane.requests,
                refused: outcome.refused[p],
                refused_share: share(outcome.refused[p], lane.requests),
                no_key: lane.no_key,
                keys: lane.keys.len(),
                keys_refused,
                top_1pct,
                top_10,
                others,
                by_route,
                by_hour,
                top_refused_keys,
            });
        }
        let sweep = sweep(&policies, target);
        Report {
            lines: outcome.lines,
            malformed: outcome.malformed.clone(),
            span: outcome.span.map(|(a, b)| (utc_minute(a), utc_minute(b))),
            policies,
            sweep,
        }
    }

    /// `report.json`.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report is plain data") + "\n"
    }

    /// The table printed on the terminal.
    pub fn to_text(&self) -> String {
        let mut out = self.summary_table().to_text();
        out.push_str(&self.footer());
        out
    }

    fn summary_table(&self) -> Table {
        let mut t = Table::new([
            "policy",
            "requests",
            "refused",
            "keys refused",
            "top 1% keys",
            "top 10 keys",
            "other keys",
        ]);
        for p in &self.policies {
            t.row([
                p.name.clone(),
                p.requests.to_string(),
                percent(p.refused_share),
                format!("{} of {}", p.keys_refused, p.keys),
                percent(p.top_1pct.refused_share),
                percent(p.top_10.refused_share),
                percent(p.others.refused_share),
            ]);
        }
        t
    }

    fn footer(&self) -> String {
        let mut out = String::new();
        if let Some(s) = &self.sweep {
            match &s.recommended {
                Some(name) => out.push_str(&format!(
                    "Smallest policy refusing at most {} of the busiest 1% of keys' requests: {name}\n",
                    percent(s.target)
                )),
                None => out.push_str(&format!("No policy of the sweep refuses at most {} of the busiest 1% of keys' requests.\n", percent(s.target))),
            }
        }
        if self.malformed.count > 0 {
            out.push_str(&format!(
                "{} of {} lines not read, for example:\n",
                self.malformed.count, self.lines
            ));
            for s in &self.malformed.samples {
                out.push_str(&format!("  line {}: {}: {}\n", s.line, s.reason, s.text));
            }
        }
        out
    }

    /// `report.md`.
    pub fn to_markdown(&self) -> String {
        let mut md = String::from("# What if: candidate rate limits over an access log\n\n");
        if let Some((a, b)) = &self.span {
            md.push_str(&format!(
                "{} lines, requests from {a} to {b} UTC.\n\n",
                self.lines
            ));
        }
        md.push_str(&self.summary_table().to_markdown());
        md.push('\n');
        md.push_str(&self.footer().replace('\n', "\n\n"));
        if self.sweep.is_some() {
            md.push_str("![refused share against the limit](whatif-sweep.png)\n\n");
        }
        md.push_str("![refusals by hour](whatif-hours.png)\n\n");
        for p in &self.policies {
            md.push_str(&format!("## {}\n\nApplies to: {}. Requests: {}, refused: {} ({}), keys refused at least once: {} of {}.", p.name, p.applies_to, p.requests, p.refused, percent(p.refused_share), p.keys_refused, p.keys));
            if p.no_key > 0 {
                md.push_str(&format!(
                    " Requests without a key (400 whatever the limit): {}.",
                    p.no_key
                ));
            }
            md.push_str("\n\n");
            let mut groups = Table::new(["keys", "count", "requests", "refused", "share"]);
            for (name, g) in [
                ("busiest 1%", &p.top_1pct),
                ("busiest 10", &p.top_10),
                ("everyone else", &p.others),
            ] {
                groups.row([
                    name.to_string(),
                    g.keys.to_string(),
                    g.requests.to_string(),
                    g.refused.to_string(),
                    percent(g.refused_share),
                ]);
            }
            md.push_str(&groups.to_markdown());
            if !p.top_refused_keys.is_empty() {
                let mut keys = Table::new([
                    "key",
                    "requests",
                    "refused",
                    "worst minute (UTC)",
                    "that minute",
                ]);
                for k in &p.top_refused_keys {
                    keys.row([
                        format!("`{}`", k.key.replace('`', "'")),
                        k.requests.to_string(),
                        k.refused.to_string(),
                        k.worst_minute.clone(),
                        format!(
                            "{} refused of {}",
                            k.worst_minute_refused, k.worst_minute_requests
                        ),
                    ]);
                }
                md.push_str("\nMost refused keys:\n\n");
                md.push_str(&keys.to_markdown());
            }
            for (title, rows) in [("By route", &p.by_route), ("By hour (UTC)", &p.by_hour)] {
                let mut t = Table::new(["", "requests", "refused", "share"]);
                for r in rows.iter() {
                    t.row([
                        r.name.replace('|', "\\|"),
                        r.requests.to_string(),
                        r.refused.to_string(),
                        percent(share(r.refused, r.requests)),
                    ]);
                }
                md.push_str(&format!("\n{title}:\n\n"));
                md.push_str(&t.to_markdown());
            }
            md.push('\n');
        }
        md
    }

    /// The charts: refusals by hour, and the sweep's curves.
    pub fn charts(&self) -> Vec<Chart> {
        const SHOWN: usize = 8;
        let mut hours = Vec::new();
        for p in self.policies.iter().take(SHOWN) {
            let points = p
                .by_hour
                .iter()
                .enumerate()
                .map(|(i, r)| (i as f64, 100.0 * share(r.refused, r.requests)));
            hours.push(Series::new(p.name.clone(), points));
        }
        let first = self
            .span
            .as_ref()
            .map_or(String::new(), |(a, _)| format!(" from {a}"));
        let mut charts = vec![Chart {
            stem: "whatif-hours".into(),
            panel_height: 380,
            panels: vec![Panel::Lines {
                title: "Refused share by hour".into(),
                x_label: format!("hours{first} UTC"),
                y_label: "refused (%)".into(),
                log_y: false,
                y_max: None,
                series: hours,
                reference: None,
            }],
        }];
        if let Some(s) = &self.sweep {
            let curve = |f: fn(&(u64, f64, f64)) -> f64| -> Vec<Series> {
                s.curves
                    .iter()
                    .map(|c| {
                        Series::new(
                            c.burst.map_or("no burst".into(), |b| format!("burst {b}")),
                            c.points.iter().map(|p| (p.0 as f64, 100.0 * f(p))),
                        )
                    })
                    .collect()
            };
            charts.push(Chart {
                stem: "whatif-sweep".into(),
                panel_height: 380,
                panels: vec![
                    Panel::Lines {
                        title: "Refused share of all requests".into(),
                        x_label: "limit (per period)".into(),
                        y_label: "refused (%)".into(),
                        log_y: false,
                        y_max: None,
                        series: curve(|p| p.1),
                        reference: None,
                    },
                    Panel::Lines {
                        title: "Refused share of the busiest 1% of keys".into(),
                        x_label: "limit (per period)".into(),
                        y_label: "refused (%)".into(),
                        log_y: false,
                        y_max: None,
                        series: curve(|p| p.2),
                        reference: Some(Reference::new(
                            100.0 * s.target,
                            format!("target {}", percent(s.target)),
                        )),
                    },
                ],
            });
        }
        charts
    }

    /// Writes `report.md`, `report.json` and the charts (SVG and PNG) into
    /// `dir`, creating it.
    pub fn write(&self, dir: &Path) -> Result<(), tollgate_sim::WriteError> {
        let files = [
            ("report.md", self.to_markdown()),
            ("report.json", self.to_json()),
        ];
        tollgate_sim::write_files(dir, &files, &self.charts())
    }
}

/// `0.12%`, with more digits for small shares.
pub fn percent(share: f64) -> String {
    let p = 100.0 * share;
    if p == 0.0 || p >= 10.0 {
        format!("{p:.1}%")
    } else if p >= 0.1 {
        format!("{p:.2}%")
    } else {
        format!("{p:.3}%")
    }
}

fn sweep(policies: &[PolicyReport], target: f64) -> Option<Sweep> {
    let mut points: Vec<(&PolicyReport, SweepPoint)> = policies
        .iter()
        .filter_map(|p| Some((p, p.point?)))
        .collect();
    // One policy is no sweep: nothing to choose between.
    if points.len() < 2 {
        return None;
    }
    points.sort_by_key(|(_, s)| (s.burst, s.limit));
    let mut curves: Vec<Curve> = Vec::new();
    for (p, s) in &points {
        let point = (s.limit, p.refused_share, p.top_1pct.refused_share);
        match curves.last_mut() {
            Some(c) if c.burst == s.burst => c.points.push(point),
            _ => curves.push(Curve {
                burst: s.burst,
                points: vec![point],
            }),
        }
    }
    let recommended = points
        .iter()
        .filter(|(p, _)| p.top_1pct.refused_share <= target)
        .min_by_key(|(_, s)| (s.limit, s.burst))
        .map(|(p, _)| p.name.clone());
    Some(Sweep {
        target,
        curves,
        recommended,
    })
}
