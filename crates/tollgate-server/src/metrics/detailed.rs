//! The `detailed_metric` series: per limit, one series per value among its
//! current top N (by hits over the last minute, from a bounded heavy-hitter
//! summary of its own, see [`tollgate::top`]) and one, `PATH:other`, for
//! every other hit. These series are kept here rather than in the
//! Prometheus recorder, which can never withdraw a series, and written
//! into its page at each scrape ([`splice`]).
//!
//! Why counters stay honest:
//!
//! - a value gets a series from its first busy hit (at least
//!   [`BUSY_HITS`] in the last minute, more than any value the summary
//!   dropped) while the limit has fewer than N, or at a scrape that finds
//!   it in the top N; its hits before that stay in `:other`;
//! - at each scrape the series are made to follow the current top N: a
//!   value that left it has its counts added to `:other` and its series
//!   withdrawn. So every series only grows while it exists, `:other` only
//!   grows, and at every scrape the series of a limit add up to every hit
//!   the limit counted (a withdrawn value's history moves, in one step, to
//!   `:other`: `increase` over `:other` shows it then);
//! - at most N + 1 series per limit, whatever the number of values.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};

use tollgate::top::{HeavyHitters, Hit, TopConfig};

/// How many values of each `detailed_metric` limit get a series of their
/// own by default.
pub const DEFAULT_SERIES: usize = 100;

/// A value's hits in the last minute before it gets a series: one-off
/// values never do.
pub(super) const BUSY_HITS: u64 = 2;

/// The most limits with per-value series; the values of a limit beyond
/// (after reloads brought many new ones) are all counted in `:other`.
const MAX_LIMITS: usize = 1024;

/// The window the top values are chosen over.
const WINDOW_NS: u64 = 60_000_000_000;

/// Keys the summary keeps per series wanted: enough that the top N are
/// told from the rest (the error bound is `hits / (this × N)`).
const SUMMARY_PER_SERIES: usize = 4;

pub(super) static BOUND: AtomicUsize = AtomicUsize::new(DEFAULT_SERIES);

/// One series' counts, by what happened to its hits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Counts {
    pub hits: u64,
    pub over: u64,
    pub within: u64,
    pub near: u64,
    pub shadow: u64,
    pub store_errors: u64,
}

impl Counts {
    /// Counts `hits` decided as the engine says (the counters' rules are
    /// envoyproxy/ratelimit's, see the module above).
    pub fn decided(&mut self, hits: u64, allowed: bool, near: bool, shadow: bool) {
        self.hits += hits;
        if !allowed {
            self.over += hits;
            if shadow {
                self.shadow += hits;
            }
        } else {
            self.within += hits;
            if near {
                self.near += hits;
            }
        }
    }

    fn add(&mut self, other: &Counts) {
        self.hits += other.hits;
        self.over += other.over;
        self.within += other.within;
        self.near += other.near;
        self.shadow += other.shadow;
        self.store_errors += other.store_errors;
    }
}

/// One limit's values.
pub(super) struct LimitSeries {
    bound: usize,
    recent: HeavyHitters,
    series: HashMap<String, Counts>,
    other: Counts,
}

impl LimitSeries {
    fn new(bound: usize) -> Self {
        let capacity = (bound * SUMMARY_PER_SERIES).max(100);
        let shape = TopConfig::new(capacity, WINDOW_NS / 6, 6).expect("a valid summary shape");
        LimitSeries {
            bound,
            recent: HeavyHitters::new(shape),
            series: HashMap::new(),
            other: Counts::default(),
        }
    }

    /// The counts `value`'s hits go to, after counting `hits` of it at
    /// `now` (0 for a store error, which is no hit).
    fn counts_of(&mut self, now: u64, value: &str, hits: u64) -> &mut Counts {
        if hits > 0 {
            self.recent.record(now, value, Hit::Admitted, hits);
        }
        if !self.series.contains_key(value) && self.series.len() < self.bound && hits > 0 {
            let (seen, dropped) = self.recent.lower_bound(now, WINDOW_NS, value);
            if seen >= BUSY_HITS && seen > dropped {
                self.series.insert(value.to_string(), Counts::default());
            }
        }
        match self.series.get_mut(value) {
            Some(counts) => counts,
            None => &mut self.other,
        }
    }

    /// Makes the series follow the top values of the last minute at `now`.
    fn follow_top(&mut self, now: u64) {
        let report = self.recent.report(now, WINDOW_NS, usize::MAX);
        let top: Vec<String> = report
            .keys
            .into_iter()
            .filter(|k| {
                let seen = k.hits - k.error;
                seen >= BUSY_HITS && seen > report.error_bound
            })
            .take(self.bound)
            .map(|k| k.key)
            .collect();
        let other = &mut self.other;
        self.series.retain(|value, counts| {
            let stays = top.contains(value);
            if !stays {
                other.add(counts);
            }
            stays
        });
        for value in top {
            self.series.entry(value).or_default();
        }
    }
}

/// Every `detailed_metric` limit's series, by limit path.
#[derive(Default)]
pub(super) struct Detailed {
    limits: HashMap<String, LimitSeries>,
}

impl Detailed {
    /// The counts the hits of `value` (a `detailed_metric` label) of the
    /// limit at `path` go to; `None` for a limit beyond [`MAX_LIMITS`].
    pub fn counts(&mut self, now: u64, path: &str, value: &str, hits: u64) -> Option<&mut Counts> {
        if !self.limits.contains_key(path) {
            if self.limits.len() >= MAX_LIMITS {
                return None;
            }
            let bound = BOUND.load(Ordering::Relaxed);
            self.limits
                .insert(path.to_string(), LimitSeries::new(bound));
        }
        let limit = self.limits.get_mut(path)?;
        Some(limit.counts_of(now, value, hits))
    }

    /// Every limit's series made to follow its top values at `now`, then
    /// written as Prometheus lines by family.
    pub fn scrape(&mut self, now: u64) -> Vec<(&'static str, String)> {
        let mut families: Vec<(&'static str, String)> = FAMILIES
            .iter()
            .map(|(name, _, _)| (*name, String::new()))
            .collect();
        let mut paths: Vec<&String> = self.limits.keys().collect();
        paths.sort();
        let paths: Vec<String> = paths.into_iter().cloned().collect();
        for path in paths {
            let limit = self.limits.get_mut(&path).expect("listed above");
            limit.follow_top(now);
            let mut series: Vec<(&str, &Counts)> =
                limit.series.iter().map(|(v, c)| (v.as_str(), c)).collect();
            series.sort_by_key(|(v, _)| *v);
            let other = format!("{path}:other");
            series.push((&other, &limit.other));
            for (label, counts) in series {
                for ((name, lines), (_, upstream, count)) in families.iter_mut().zip(FAMILIES) {
                    write_line(lines, name, upstream, label, count(counts));
                }
            }
        }
        families.retain(|(_, lines)| !lines.is_empty());
        families
    }
}

/// Each counter family written for a series: its name, whether it is
/// labelled as envoyproxy/ratelimit's (`domain`, `key1`, `key2`) rather
/// than tollgate's (`rule`), and its count.
type Family = (&'static str, bool, fn(&Counts) -> u64);

const FAMILIES: [Family; 10] = [
    (super::HITS, false, |c| c.hits),
    (super::OVER_LIMIT, false, |c| c.over),
    (super::NEAR_LIMIT, false, |c| c.near),
    (super::SHADOW, false, |c| c.shadow),
    (super::STORE_ERRORS, false, |c| c.store_errors),
    (super::UPSTREAM_TOTAL_HITS, true, |c| c.hits),
    (super::UPSTREAM_OVER_LIMIT, true, |c| c.over),
    (super::UPSTREAM_NEAR_LIMIT, true, |c| c.near),
    (super::UPSTREAM_WITHIN_LIMIT, true, |c| c.within),
    (super::UPSTREAM_SHADOW_MODE, true, |c| c.shadow),
];

fn write_line(out: &mut String, name: &str, upstream: bool, label: &str, value: u64) {
    let labels = if upstream {
        super::upstream_labels(label)
    } else {
        vec![("rule", label.to_string())]
    };
    let labels: Vec<String> = labels
        .iter()
        .map(|(name, value)| format!("{name}=\"{}\"", escape(value)))
        .collect();
    let _ = writeln!(out, "{name}{{{}}} {value}", labels.join(","));
}

/// A label value as the exposition format writes it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `page` (the recorder's) with each family's `lines` added to it: after
/// the family's `# TYPE` line when the recorder has the family (a family's
/// samples must be together), as a family of their own when not.
pub(super) fn splice(page: String, families: Vec<(&'static str, String)>) -> String {
    let mut page = page;
    for (name, lines) in families {
        let type_line = format!("# TYPE {name} counter\n");
        match page.find(&type_line) {
            Some(at) => page.insert_str(at + type_line.len(), &lines),
            None => {
                page.push_str(&type_line);
                page.push_str(&lines);
                page.push('\n');
            }
        }
    }
    page
}
