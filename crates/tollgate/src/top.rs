//! Who is being limited right now: a bounded heavy-hitter summary of each
//! rule's keys over sliding recent windows ([`HeavyHitters`], one per rule;
//! [`Top`], rules by name).
//!
//! # Algorithm and error bound
//!
//! Time is cut into sub-windows of [`TopConfig::sub_window_ns`]; each keeps
//! a weighted Space-Saving summary (Metwally, Agrawal and El Abbadi, 2005)
//! of at most [`TopConfig::capacity`] (`k`) keys, counting the hits of
//! every key as admitted, refused or shadow-refused, and the exact totals
//! of every hit. A window (say the last minute) is the current sub-window
//! and the whole ones before it, merged. For a window holding `N` hits:
//!
//! - every reported count [`KeyCount::hits`] is at least the key's true
//!   count and at most [`KeyCount::error`] above it;
//! - every `error` is at most the window's [`WindowReport::error_bound`],
//!   the sum over its sub-windows (of every stripe, below) of the smallest
//!   count of each full one, which is at most `N / k`;
//! - every key whose true count exceeds `error_bound` is reported (when
//!   the report is not cut shorter than the candidates,
//!   [`HeavyHitters::report`] with `n` large enough): a key missing from
//!   every sub-window has at most `error_bound` hits. Refused and
//!   shadow-refused hits are part of a key's hits, so a key refused more
//!   than `error_bound` times is reported too;
//! - the admitted, refused and shadow-refused counts of a key
//!   ([`KeyCount::counts`]) are exact counts of the hits seen while it was
//!   tracked: lower bounds, each at most `error` below the truth;
//! - the window's totals ([`WindowReport::totals`]) are exact.
//!
//! # Threads
//!
//! Each thread records into a stripe of its own (threads are given stripes
//! in turn as they first record, [`TopConfig::stripes`] of them, by default
//! one per core up to 8), each stripe a ring of sub-windows behind its own
//! lock. Threads serving requests side by side then neither wait for one
//! another nor pull the summary's memory from each other's cache, which a
//! single lock per rule made cost more than the summary's own work.
//! A report merges every stripe's sub-windows as it merges sub-windows: the
//! stripes split the hits into disjoint streams as time does, so the bounds
//! below hold unchanged, with `N` every hit of the window whichever thread
//! recorded it (each stripe's smallest count is at most its share of the
//! hits over `k`, and the shares add up to `N`).
//!
//! # Memory
//!
//! At most `k` keys per sub-window and stripe, whatever the number of
//! distinct keys: `k × sub_windows × stripes` keys per rule (a stripe no
//! thread records into holds nothing), and [`Top`] tracks at most
//! [`TopConfig::max_rules`] rules. `k` is at most
//! [`TopConfig::MAX_CAPACITY`]; each key kept costs one 64-byte line for
//! its numbers, 12 bytes for its place among the counts, and its bytes.
//! Each sub-window's index of its keys holds at most `4k` entries (an
//! evicted key's entry is left until the index is made anew, which spares
//! a lookup per new key). A hit allocates
//! nothing once a sub-window's summary is full and its index has grown to
//! that bound: a new key is copied into the buffer of the one it replaces.
//!
//! # Cost of a hit
//!
//! A hit on a key held moves it to the bucket of its new count (Space-
//! Saving's "stream summary", buckets of equal counts in a list by count);
//! a new key takes the place of one of the smallest, found first in the
//! list. Either way one hash of the key, one lookup, and no search for the
//! smallest: O(1) for a weight of 1, and a walk past at most one bucket
//! per distinct count held for a larger weight.
//!
//! # Time
//!
//! No clock is read here: every call takes the time, in nanoseconds on the
//! caller's clock, as the rest of the core does. A hit older than the
//! oldest sub-window kept is dropped.

mod space_saving;

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use tollgate_core::Limit;

use self::space_saving::Summary;
use crate::shard_lock::ShardLock;

/// What a rule did with a hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hit {
    /// Admitted.
    Admitted,
    /// Refused by an enforcing rule.
    Refused,
    /// A shadow rule would have refused it (it passed).
    ShadowRefused,
}

impl Hit {
    /// What a rule's decision was: admitted, or refused by an enforcing
    /// rule or, in shadow, only counted as refused.
    pub fn decided(allowed: bool, shadow: bool) -> Hit {
        match (allowed, shadow) {
            (true, _) => Hit::Admitted,
            (false, true) => Hit::ShadowRefused,
            (false, false) => Hit::Refused,
        }
    }
}

/// Hits by what the rule did with them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Admitted hits.
    pub admitted: u64,
    /// Refused hits.
    pub refused: u64,
    /// Hits a shadow rule would have refused.
    pub shadow_refused: u64,
}

impl Counts {
    fn add(&mut self, hit: Hit, hits: u64) {
        let count = match hit {
            Hit::Admitted => &mut self.admitted,
            Hit::Refused => &mut self.refused,
            Hit::ShadowRefused => &mut self.shadow_refused,
        };
        *count = count.saturating_add(hits);
    }

    fn merge(&mut self, other: &Counts) {
        self.add(Hit::Admitted, other.admitted);
        self.add(Hit::Refused, other.refused);
        self.add(Hit::ShadowRefused, other.shadow_refused);
    }

    /// Every hit.
    pub fn total(&self) -> u64 {
        self.admitted
            .saturating_add(self.refused)
            .saturating_add(self.shadow_refused)
    }

    /// The share of hits refused or, by a shadow rule, that would have
    /// been (0 without hits).
    pub fn refusal_ratio(&self) -> f64 {
        match self.total() {
            0 => 0.0,
            total => (self.refused.saturating_add(self.shadow_refused)) as f64 / total as f64,
        }
    }
}

/// Why a [`TopConfig`] is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TopConfigError {
    /// A summary of no keys names no one.
    #[error("the number of keys kept must be at least 1")]
    NoCapacity,
    /// Time must be cut into sub-windows of some length.
    #[error("the sub-window must be at least 1 ns")]
    NoSubWindow,
    /// At least the current sub-window is kept.
    #[error("at least one sub-window must be kept")]
    NoSubWindows,
    /// More keys per sub-window than a summary numbers.
    #[error("at most {max} keys may be kept per sub-window, not {asked}", max = TopConfig::MAX_CAPACITY)]
    TooManyKeys {
        /// The capacity asked for.
        asked: usize,
    },
}

/// The shape of the summaries: how many keys, over what time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopConfig {
    capacity: usize,
    sub_window_ns: u64,
    sub_windows: usize,
    max_rules: usize,
    stripes: usize,
}

impl TopConfig {
    /// The default number of keys kept per sub-window.
    pub const DEFAULT_CAPACITY: usize = 100;
    /// The most keys kept per sub-window (2^24).
    pub const MAX_CAPACITY: usize = space_saving::MAX_CAPACITY;
    /// The default sub-window: 10 s.
    pub const DEFAULT_SUB_WINDOW_NS: u64 = 10_000_000_000;
    /// The default number of sub-windows: 60, ten minutes.
    pub const DEFAULT_SUB_WINDOWS: usize = 60;
    /// The default bound on the rules a [`Top`] tracks.
    pub const DEFAULT_MAX_RULES: usize = 1024;
    /// The most stripes a summary is cut into.
    pub const MAX_STRIPES: usize = 64;
    /// The most stripes given by default, whatever the number of cores.
    const DEFAULT_MAX_STRIPES: usize = 8;

    /// `capacity` keys per sub-window of `sub_window_ns`, `sub_windows` of
    /// them kept (the longest window reported is their product).
    pub fn new(
        capacity: usize,
        sub_window_ns: u64,
        sub_windows: usize,
    ) -> Result<Self, TopConfigError> {
        if capacity == 0 {
            return Err(TopConfigError::NoCapacity);
        }
        if capacity > Self::MAX_CAPACITY {
            return Err(TopConfigError::TooManyKeys { asked: capacity });
        }
        if sub_window_ns == 0 {
            return Err(TopConfigError::NoSubWindow);
        }
        if sub_windows == 0 {
            return Err(TopConfigError::NoSubWindows);
        }
        Ok(TopConfig {
            capacity,
            sub_window_ns,
            sub_windows,
            max_rules: Self::DEFAULT_MAX_RULES,
            stripes: default_stripes(),
        })
    }

    /// The same, with [`Top`] tracking at most `max_rules` rules (the
    /// rules after those are not summarised).
    pub fn max_rules(mut self, max_rules: usize) -> Self {
        self.max_rules = max_rules;
        self
    }

    /// The same, with each summary cut into `stripes` stripes, one for
    /// each thread recording side by side (see the module docs), rounded up
    /// to a power of two from 1 to [`TopConfig::MAX_STRIPES`]: 1 for a
    /// single-threaded caller, which then keeps at most `k × sub_windows`
    /// keys per rule. By default, one per core up to 8.
    pub fn stripes(mut self, stripes: usize) -> Self {
        self.stripes = stripes.clamp(1, Self::MAX_STRIPES).next_power_of_two();
        self
    }

    /// How many stripes each summary is cut into (a power of two).
    pub fn stripe_count(&self) -> usize {
        self.stripes
    }

    /// Keys kept per sub-window and stripe (`k`).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The length of a sub-window, in nanoseconds.
    pub fn sub_window_ns(&self) -> u64 {
        self.sub_window_ns
    }

    /// How many sub-windows are kept.
    pub fn sub_windows(&self) -> usize {
        self.sub_windows
    }

    /// The longest window reported, in nanoseconds.
    pub fn span_ns(&self) -> u64 {
        self.sub_window_ns.saturating_mul(self.sub_windows as u64)
    }
}

impl Default for TopConfig {
    fn default() -> Self {
        TopConfig {
            capacity: Self::DEFAULT_CAPACITY,
            sub_window_ns: Self::DEFAULT_SUB_WINDOW_NS,
            sub_windows: Self::DEFAULT_SUB_WINDOWS,
            max_rules: Self::DEFAULT_MAX_RULES,
            stripes: default_stripes(),
        }
    }
}

/// One stripe per core, up to [`TopConfig::DEFAULT_MAX_STRIPES`].
fn default_stripes() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(TopConfig::DEFAULT_MAX_STRIPES)
        .next_power_of_two()
}

/// The calling thread's stripe number, before it is reduced to a summary's
/// stripes: threads take the next number as they first record, so the
/// threads of a pool get distinct stripes while there are enough of them.
fn thread_stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    // `usize::MAX` until the thread first records: a constant initial
    // value makes every later read one load, with no lazy-init check.
    thread_local! {
        static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    STRIPE.with(|stripe| match stripe.get() {
        usize::MAX => {
            let taken = NEXT.fetch_add(1, Ordering::Relaxed) % TopConfig::MAX_STRIPES;
            stripe.set(taken);
            taken
        }
        taken => taken,
    })
}

/// How a key is shown in a report: as recorded, or through a one-way
/// function of the caller's choosing (a digest) for keys that are secrets.
pub type ShowKey = fn(&str) -> String;

/// One key's numbers over a window.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyCount {
    /// The key, as the rule shows it.
    pub key: String,
    /// The estimated hits: at least the true count, at most `error` above.
    pub hits: u64,
    /// How much `hits` may overstate.
    pub error: u64,
    /// Hits counted exactly while the key was tracked, by outcome.
    pub counts: Counts,
}

/// A window's numbers for one rule.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowReport {
    /// The window asked for, in nanoseconds (at most the span kept).
    pub window_ns: u64,
    /// The time the window covers: from the start of its oldest
    /// sub-window to now (between `window_ns` minus a sub-window and
    /// `window_ns`).
    pub covered_ns: u64,
    /// Every hit of the window, exact.
    pub totals: Counts,
    /// The most any key's `hits` overstate (at most `totals.total() / k`);
    /// every key with more true hits than this is among the candidates.
    pub error_bound: u64,
    /// The keys with the most hits, most first.
    pub keys: Vec<KeyCount>,
}

impl WindowReport {
    /// How far `key` runs over `limit` in this window: its hits divided by
    /// what the limit admits in the time covered, and never less than one
    /// period's quota, which any limit lets through in a span shorter than
    /// its period (2.0: twice the limit); `None` for a limit that admits
    /// nothing.
    pub fn limit_ratio(&self, key: &KeyCount, limit: &Limit) -> Option<f64> {
        let period = limit.quota.period_ns().max(1);
        let allowed =
            limit.quota.limit() as f64 * self.covered_ns.max(period) as f64 / period as f64;
        (allowed > 0.0).then(|| key.hits as f64 / allowed)
    }
}

/// One rule's heavy hitters over sliding windows (see the module docs).
pub struct HeavyHitters {
    config: TopConfig,
    show: Option<ShowKey>,
    stripes: Box<[Stripe]>,
}

/// One stripe's ring, on cache lines of its own so that two threads
/// recording into neighbouring stripes do not share a line. Behind the
/// keyed limiter's shard lock rather than a mutex: a stripe is nearly
/// always free (its own thread's), and that lock is released with a plain
/// store where a mutex's release is a second atomic exchange, a cost every
/// hit paid. A thread that finds a report holding the stripe spins, then
/// yields, never sleeps.
#[repr(align(128))]
struct Stripe(ShardLock<Ring>);

/// The sub-windows kept.
struct Ring {
    /// Sub-window `e` (time `e × sub_window_ns` on) lives at `e % len`,
    /// with the `e` it holds.
    windows: Vec<(u64, Summary)>,
    /// The start of the sub-window counted in last and its place: a hit in
    /// the same sub-window, nearly every one, finds it without dividing.
    current: Option<(u64, usize)>,
}

/// A ring slot that never held a sub-window.
const EMPTY: u64 = u64::MAX;

impl Ring {
    /// The place of the sub-window of `now_ns`, emptied first if it held
    /// an older one; `None` when `now_ns` is older than every sub-window
    /// kept.
    fn enter(&mut self, now_ns: u64, sub_window_ns: u64) -> Option<usize> {
        let epoch = now_ns / sub_window_ns;
        let place = (epoch % self.windows.len() as u64) as usize;
        let (held, summary) = &mut self.windows[place];
        if *held != epoch {
            if *held != EMPTY && *held > epoch {
                return None;
            }
            summary.clear();
            *held = epoch;
        }
        self.current = Some((epoch * sub_window_ns, place));
        Some(place)
    }
}

impl HeavyHitters {
    /// A summary of `config`'s shape, showing keys as recorded.
    pub fn new(config: TopConfig) -> Self {
        let stripe = || {
            let windows = (0..config.sub_windows)
                .map(|_| (EMPTY, Summary::new(config.capacity)))
                .collect();
            Stripe(ShardLock::new(Ring {
                windows,
                current: None,
            }))
        };
        HeavyHitters {
            config,
            show: None,
            stripes: (0..config.stripes).map(|_| stripe()).collect(),
        }
    }

    /// The same, showing every key through `show` (a digest, for keys that
    /// are secrets): reports never carry the key itself.
    pub fn shown_as(mut self, show: ShowKey) -> Self {
        self.show = Some(show);
        self
    }

    /// The summaries' shape.
    pub fn config(&self) -> &TopConfig {
        &self.config
    }

    /// The keys held now, over every sub-window and stripe kept: never
    /// more than `capacity × sub_windows` per stripe recorded into.
    pub fn tracked(&self) -> usize {
        self.stripes
            .iter()
            .map(|stripe| {
                stripe
                    .0
                    .write()
                    .windows
                    .iter()
                    .map(|(_, s)| s.len())
                    .sum::<usize>()
            })
            .sum()
    }

    /// Counts `hits` hits of `key` at `now_ns`, as `hit`.
    pub fn record(&self, now_ns: u64, key: &str, hit: Hit, hits: u64) {
        self.record_on(thread_stripe(), now_ns, key, hit, hits);
    }

    /// [`HeavyHitters::record`] into the stripe numbered `stripe` (taken
    /// modulo the stripes there are), for a caller that numbers its own
    /// threads (a worker's index): every number gives the same reports, and
    /// threads that keep to numbers of their own never wait for each other.
    // Always inlined: `record` then costs no call more than before stripes,
    // and the summary's own `record` keeps a single caller, inlined too.
    #[inline(always)]
    pub fn record_on(&self, stripe: usize, now_ns: u64, key: &str, hit: Hit, hits: u64) {
        let sub = self.config.sub_window_ns;
        // The stripe count is a power of two: a mask, not a division.
        let mut ring = self.stripes[stripe & (self.stripes.len() - 1)].0.write();
        let place = match ring.current {
            Some((start, place)) if now_ns >= start && now_ns - start < sub => place,
            _ => match ring.enter(now_ns, sub) {
                Some(place) => place,
                // Older than every sub-window kept: too late to count.
                None => return,
            },
        };
        ring.windows[place].1.record(key, hit, hits);
    }

    /// At least how many hits `key` had over the last `window_ns` at
    /// `now_ns` (those counted while it was held), and the most any key the
    /// summaries do not hold could have had (the window's error bound):
    /// `key` is certainly busier than every dropped key when the first
    /// exceeds the second. One key's question, without a whole report.
    pub fn lower_bound(&self, now_ns: u64, window_ns: u64, key: &str) -> (u64, u64) {
        let (oldest, current) = self.epochs(now_ns, window_ns);
        let (mut seen, mut dropped) = (0u64, 0u64);
        self.each_summary(oldest, current, |summary| {
            dropped = dropped.saturating_add(summary.untracked_bound());
            if let Some(slot) = summary.get(key) {
                seen = seen.saturating_add(slot.count - slot.error);
            }
        });
        (seen, dropped)
    }

    /// Calls `f` with each summary, of every stripe, of the sub-windows
    /// `oldest` to `current`, one stripe locked at a time.
    fn each_summary(&self, oldest: u64, current: u64, mut f: impl FnMut(&Summary)) {
        for stripe in self.stripes.iter() {
            let ring = stripe.0.write();
            for (held, summary) in ring.windows.iter() {
                if *held != EMPTY && (oldest..=current).contains(held) {
                    f(summary);
                }
            }
        }
    }

    /// The oldest and the current sub-window of the last `window_ns`.
    fn epochs(&self, now_ns: u64, window_ns: u64) -> (u64, u64) {
        let current = now_ns / self.config.sub_window_ns;
        let wanted = window_ns
            .div_ceil(self.config.sub_window_ns)
            .clamp(1, self.config.sub_windows as u64);
        (current.saturating_sub(wanted - 1), current)
    }

    /// The `n` keys with the most hits over the last `window_ns` at
    /// `now_ns` (the window cut to whole sub-windows, at most the span
    /// kept), with the window's totals and error bound.
    pub fn report(&self, now_ns: u64, window_ns: u64, n: usize) -> WindowReport {
        let sub = self.config.sub_window_ns;
        let (oldest, current) = self.epochs(now_ns, window_ns);
        let mut totals = Counts::default();
        let mut error_bound = 0u64;
        // Per key: sums over the sub-windows holding it, and the sum of
        // those sub-windows' own bounds (replaced by the key's counts).
        let mut merged: HashMap<String, (KeyCount, u64)> = HashMap::new();
        self.each_summary(oldest, current, |summary| {
            totals.merge(&summary.totals);
            let bound = summary.untracked_bound();
            error_bound = error_bound.saturating_add(bound);
            for slot in summary.tracked() {
                let (key, bounds) = merged.entry(slot.key.to_string()).or_insert_with(|| {
                    (
                        KeyCount {
                            key: String::new(),
                            hits: 0,
                            error: 0,
                            counts: Counts::default(),
                        },
                        0,
                    )
                });
                key.hits = key.hits.saturating_add(slot.count);
                key.error = key.error.saturating_add(slot.error);
                key.counts.merge(&slot.counts);
                *bounds = bounds.saturating_add(bound);
            }
        });
        let mut keys: Vec<KeyCount> = merged
            .into_iter()
            .map(|(name, (mut key, bounds))| {
                // Where the key was not tracked, it had at most that
                // sub-window's (and stripe's) bound.
                let missing = error_bound - bounds;
                key.hits = key.hits.saturating_add(missing);
                key.error = key.error.saturating_add(missing);
                key.key = match self.show {
                    Some(show) => show(&name),
                    None => name,
                };
                key
            })
            .collect();
        keys.sort_unstable_by(|a, b| b.hits.cmp(&a.hits).then_with(|| a.key.cmp(&b.key)));
        keys.truncate(n);
        WindowReport {
            window_ns: window_ns.min(self.config.span_ns()),
            covered_ns: now_ns - oldest * sub,
            totals,
            error_bound,
            keys,
        }
    }
}

/// [`HeavyHitters`] for rules known by name, created on first use (up to
/// [`TopConfig::max_rules`]).
pub struct Top {
    config: TopConfig,
    rules: RwLock<HashMap<Arc<str>, Arc<HeavyHitters>>>,
}

impl Top {
    /// No rules yet; each will get a summary of `config`'s shape.
    pub fn new(config: TopConfig) -> Self {
        Top {
            config,
            rules: RwLock::default(),
        }
    }

    /// The summaries' shape.
    pub fn config(&self) -> &TopConfig {
        &self.config
    }

    /// Counts `hits` hits of `key` under `rule` at `now_ns`, as `hit`; a
    /// rule beyond [`TopConfig::max_rules`] is not counted.
    pub fn record(&self, rule: &str, now_ns: u64, key: &str, hit: Hit, hits: u64) {
        if let Some(summary) = self.rules.read().get(rule) {
            summary.record(now_ns, key, hit, hits);
            return;
        }
        if let Some(summary) = self.rule(rule) {
            summary.record(now_ns, key, hit, hits);
        }
    }

    /// `rule`'s summary, created if it is new; `None` for a new rule beyond
    /// [`TopConfig::max_rules`].
    pub fn rule(&self, rule: &str) -> Option<Arc<HeavyHitters>> {
        if let Some(summary) = self.rules.read().get(rule) {
            return Some(Arc::clone(summary));
        }
        let mut rules = self.rules.write();
        if rules.len() >= self.config.max_rules && !rules.contains_key(rule) {
            return None;
        }
        let summary = rules
            .entry(Arc::from(rule))
            .or_insert_with(|| Arc::new(HeavyHitters::new(self.config)));
        Some(Arc::clone(summary))
    }

    /// Every rule's summary, by name.
    pub fn rules(&self) -> Vec<(Arc<str>, Arc<HeavyHitters>)> {
        let mut rules: Vec<_> = self
            .rules
            .read()
            .iter()
            .map(|(name, summary)| (Arc::clone(name), Arc::clone(summary)))
            .collect();
        rules.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        rules
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn config(capacity: usize) -> TopConfig {
        TopConfig::new(capacity, 10 * SEC, 6).expect("valid")
    }

    #[test]
    fn a_bad_shape_is_an_error() {
        assert_eq!(TopConfig::new(0, SEC, 1), Err(TopConfigError::NoCapacity));
        assert_eq!(TopConfig::new(1, 0, 1), Err(TopConfigError::NoSubWindow));
        assert_eq!(TopConfig::new(1, SEC, 0), Err(TopConfigError::NoSubWindows));
        let asked = TopConfig::MAX_CAPACITY + 1;
        assert_eq!(
            TopConfig::new(asked, SEC, 1),
            Err(TopConfigError::TooManyKeys { asked })
        );
        assert!(TopConfig::new(TopConfig::MAX_CAPACITY, SEC, 1).is_ok());
    }

    #[test]
    fn counts_by_outcome_and_ranks_by_hits() {
        let top = HeavyHitters::new(config(10));
        top.record(0, "ada", Hit::Admitted, 3);
        top.record(SEC, "ada", Hit::Refused, 2);
        top.record(2 * SEC, "bob", Hit::ShadowRefused, 1);
        let report = top.report(3 * SEC, 60 * SEC, 10);
        assert_eq!(report.error_bound, 0);
        assert_eq!(report.totals.total(), 6);
        assert_eq!(report.keys[0].key, "ada");
        assert_eq!(report.keys[0].hits, 5);
        assert_eq!(
            report.keys[0].counts,
            Counts {
                admitted: 3,
                refused: 2,
                shadow_refused: 0
            }
        );
        assert!((report.keys[0].counts.refusal_ratio() - 0.4).abs() < 1e-9);
        assert_eq!(report.keys[1].counts.shadow_refused, 1);
    }

    #[test]
    fn old_sub_windows_leave_the_window() {
        let top = HeavyHitters::new(config(10));
        top.record(0, "early", Hit::Admitted, 7);
        top.record(25 * SEC, "late", Hit::Admitted, 1);
        // At 25 s, the last 10 s is the sub-window from 20 s alone.
        let short = top.report(25 * SEC, 10 * SEC, 10);
        assert_eq!(short.keys.len(), 1);
        assert_eq!(short.keys[0].key, "late");
        assert_eq!(short.covered_ns, 5 * SEC);
        // The last minute still has both, until the ring comes round.
        assert_eq!(top.report(25 * SEC, 60 * SEC, 10).totals.total(), 8);
        assert_eq!(top.report(65 * SEC, 60 * SEC, 10).totals.total(), 1);
        // A sub-window reused for a later time forgets the earlier one.
        top.record(60 * SEC, "next", Hit::Admitted, 1);
        let report = top.report(60 * SEC, 60 * SEC, 10);
        assert!(report.keys.iter().all(|k| k.key != "early"));
    }

    #[test]
    fn a_late_hit_goes_to_its_own_sub_window_and_the_next_to_the_current() {
        let top = HeavyHitters::new(config(10));
        top.record(15 * SEC, "now", Hit::Admitted, 1);
        top.record(5 * SEC, "late", Hit::Admitted, 1);
        top.record(16 * SEC, "now", Hit::Admitted, 1);
        let current = top.report(16 * SEC, 10 * SEC, 10);
        assert_eq!(current.totals.total(), 2);
        assert_eq!(current.keys.len(), 1);
        let both = top.report(16 * SEC, 20 * SEC, 10);
        assert_eq!(both.totals.total(), 3);
    }

    #[test]
    fn a_hit_too_old_for_the_ring_is_dropped() {
        let top = HeavyHitters::new(config(10));
        top.record(60 * SEC, "now", Hit::Admitted, 1);
        top.record(0, "stale", Hit::Admitted, 1);
        let report = top.report(60 * SEC, 60 * SEC, 10);
        assert_eq!(report.totals.total(), 1);
    }

    #[test]
    fn lower_bound_tells_a_busy_key_from_the_dropped_ones() {
        let top = HeavyHitters::new(config(2));
        top.record(0, "busy", Hit::Admitted, 5);
        top.record(0, "a", Hit::Admitted, 1);
        // `b` takes `a`'s place: held at 2, 1 of them `a`'s.
        top.record(0, "b", Hit::Admitted, 1);
        assert_eq!(top.lower_bound(0, 60 * SEC, "busy"), (5, 2));
        assert_eq!(top.lower_bound(0, 60 * SEC, "b"), (1, 2));
        assert_eq!(top.lower_bound(0, 60 * SEC, "a"), (0, 2));
        assert_eq!(top.lower_bound(70 * SEC, 10 * SEC, "busy"), (0, 0));
    }

    #[test]
    fn secret_keys_are_shown_through_the_callers_function() {
        let top = HeavyHitters::new(config(10)).shown_as(|k| format!("h{}", k.len()));
        top.record(0, "sk-secret", Hit::Admitted, 1);
        let report = top.report(0, 60 * SEC, 10);
        assert_eq!(report.keys[0].key, "h9");
    }

    #[test]
    fn limit_ratio_compares_hits_with_what_the_limit_admits() {
        let top = HeavyHitters::new(config(10));
        top.record(0, "ada", Hit::Admitted, 120);
        let report = top.report(60 * SEC - 1, 60 * SEC, 10);
        let limit = Limit::new(
            tollgate_core::Algorithm::FixedWindow,
            tollgate_core::Quota::per_minute(60).expect("valid"),
        );
        let ratio = report
            .limit_ratio(&report.keys[0], &limit)
            .expect("a limit");
        assert!((ratio - 2.0).abs() < 1e-6, "{ratio}");
    }

    #[test]
    fn limit_ratio_counts_at_least_one_period_of_quota() {
        // 60 hits in the 2 s since a server started, under 50 a minute: 1.2
        // times the quota, not 36 times a 2 s share of it.
        let top = HeavyHitters::new(config(10));
        top.record(0, "acme", Hit::Admitted, 60);
        let report = top.report(2 * SEC, 60 * SEC, 10);
        let limit = Limit::new(
            tollgate_core::Algorithm::FixedWindow,
            tollgate_core::Quota::per_minute(50).expect("valid"),
        );
        let ratio = report
            .limit_ratio(&report.keys[0], &limit)
            .expect("a limit");
        assert!((ratio - 1.2).abs() < 1e-6, "{ratio}");
    }

    #[test]
    fn top_stops_adding_rules_at_its_bound() {
        let top = Top::new(config(2).max_rules(2));
        for rule in ["a", "b", "c"] {
            top.record(rule, 0, "k", Hit::Admitted, 1);
        }
        let names: Vec<_> = top.rules().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, [Arc::from("a"), Arc::from("b")]);
    }
}
