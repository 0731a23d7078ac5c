//! [`Breaker`]: a circuit breaker that stops calling a failing store.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::Clock;

/// When a [`Breaker`] opens and how it recovers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BreakerConfig {
    consecutive: u32,
    ratio: f64,
    min_calls: u32,
    window: Duration,
    open_for: Duration,
    probes: u32,
}

impl Default for BreakerConfig {
    /// Opens after 5 failures in a row, or half the calls of the last 10 s
    /// failing (at least 20 calls); stays open 1 s; closes after 3 probes
    /// succeed.
    fn default() -> Self {
        BreakerConfig {
            consecutive: 5,
            ratio: 0.5,
            min_calls: 20,
            window: Duration::from_secs(10),
            open_for: Duration::from_secs(1),
            probes: 3,
        }
    }
}

impl BreakerConfig {
    /// Opens after `failures` consecutive failures (0 disables this rule).
    pub fn consecutive(mut self, failures: u32) -> Self {
        self.consecutive = failures;
        self
    }

    /// Opens when at least `min_calls` calls ended in the last `window` and
    /// a share of at least `ratio` (0 to 1) of them failed. A ratio above 1
    /// disables this rule.
    pub fn failure_ratio(mut self, ratio: f64, min_calls: u32, window: Duration) -> Self {
        self.ratio = ratio;
        self.min_calls = min_calls.max(1);
        self.window = window.max(Duration::from_nanos(WINDOW_SLOTS));
        self
    }

    /// How long the breaker stays open before probing (default 1 s).
    pub fn open_for(mut self, duration: Duration) -> Self {
        self.open_for = duration;
        self
    }

    /// How many probes must succeed, half-open, to close (at least 1).
    pub fn probes(mut self, probes: u32) -> Self {
        self.probes = probes.max(1);
        self
    }

    /// The failure-ratio rule as set: `(ratio, min_calls, window)`, so a
    /// caller can change one of the three and keep the others.
    pub fn ratio_rule(&self) -> (f64, u32, Duration) {
        (self.ratio, self.min_calls, self.window)
    }

    /// Whether a success, with no failure in the window, leaves the ratio
    /// rule unmet: not with a ratio of 0 (or NaN), which any `min_calls`
    /// calls reach.
    fn success_cannot_open(&self) -> bool {
        self.ratio > 0.0
    }
}

/// Where a [`Breaker`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Calls go to the store.
    Closed,
    /// Calls are refused without reaching the store.
    Open,
    /// A few probe calls go to the store to see whether it is back.
    HalfOpen,
}

impl BreakerState {
    /// The lower-case name used in logs and metric labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// Leave to call the store, from [`Breaker::try_call`]; give it back with
/// the outcome to [`Breaker::record`].
#[derive(Debug)]
#[must_use = "record the outcome of the call"]
pub struct CallPermit {
    probe: bool,
}

/// The failure-ratio window is counted in this many slots, so old calls
/// leave it a slot at a time rather than all at once.
const WINDOW_SLOTS: u64 = 10;

/// A circuit breaker for one store.
///
/// State changes are logged with `tracing` (target `tollgate::breaker`) and
/// counted in the `metrics` counter `tollgate_breaker_transitions_total`
/// with labels `store` and `to`; the gauge `tollgate_breaker_state`
/// (label `store`) holds the state reached: 0 closed, 1 half-open, 2 open.
///
/// Closed, it lets every call through and watches outcomes; it opens after
/// `consecutive` failures in a row, or when at least `min_calls` calls in
/// the last `window` failed at a ratio of `ratio` or more. Open, it refuses
/// every call without touching the store (one atomic load and one clock
/// read) for `open_for`; then it half-opens and lets `probes` calls
/// through: all succeed and it closes, one fails and it opens again.
///
/// While it is closed and no failure is counted (none in a row, none in the
/// window), a call takes its leave and records its success without the
/// lock: one load of a flag and one count in the window, so that the calls
/// of a healthy store (every decision of a server's workers) do not queue
/// on one mutex. A success that races a failure may be counted after the
/// failure's own look at the window, as if it had ended a moment later.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Breaker, BreakerConfig, BreakerState, FakeClock};
///
/// let clock = FakeClock::new();
/// let breaker = Breaker::new("redis", BreakerConfig::default().consecutive(2), clock.clone());
/// for _ in 0..2 {
///     let permit = breaker.try_call().unwrap();
///     breaker.record(permit, false);
/// }
/// assert_eq!(breaker.state(), BreakerState::Open);
/// assert!(breaker.try_call().is_none(), "open: the store is not called");
/// clock.advance(Duration::from_secs(1));
/// assert!(breaker.try_call().is_some(), "half-open: a probe goes through");
/// ```
pub struct Breaker<C> {
    name: String,
    config: BreakerConfig,
    clock: C,
    /// Clock time until which the breaker is open; 0 when not open. Read
    /// without the lock, so an open breaker refuses in a few nanoseconds.
    open_until: AtomicU64,
    /// Closed, no failure in a row nor in the window, and a failure ratio
    /// that a success cannot reach: a success then changes nothing but the
    /// window's calls. Set and cleared under the lock.
    calm: AtomicBool,
    /// Nanoseconds of one slot of the failure-ratio window.
    slot_ns: u64,
    /// The failure-ratio window, oldest slots overwritten as it moves.
    slots: [Slot; WINDOW_SLOTS as usize],
    inner: Mutex<Inner>,
}

/// The calls and failures of one slot of the window. Started again, when
/// the window comes round to it, under the lock; counted by calm successes
/// without it.
struct Slot {
    /// Which slot of time it counts; `u64::MAX` for none yet.
    index: AtomicU64,
    calls: AtomicU32,
    failures: AtomicU32,
}

impl Slot {
    fn empty() -> Self {
        Slot {
            index: AtomicU64::new(u64::MAX),
            calls: AtomicU32::new(0),
            failures: AtomicU32::new(0),
        }
    }

    fn clear(&self) {
        self.index.store(u64::MAX, Ordering::Relaxed);
        self.calls.store(0, Ordering::Relaxed);
        self.failures.store(0, Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct Inner {
    state: BreakerState,
    consecutive: u32,
    /// Probes let through and probes that succeeded, while half-open.
    probes_out: u32,
    probes_ok: u32,
}

impl<C: Clock> Breaker<C> {
    /// A closed breaker for the store called `name` (used in logs and
    /// metrics).
    pub fn new(name: impl Into<String>, config: BreakerConfig, clock: C) -> Self {
        let name = name.into();
        metrics::gauge!("tollgate_breaker_state", "store" => name.clone()).set(0.0);
        let slot_ns = u64::try_from(config.window.as_nanos() / u128::from(WINDOW_SLOTS))
            .unwrap_or(u64::MAX)
            .max(1);
        Breaker {
            name,
            config,
            clock,
            open_until: AtomicU64::new(0),
            calm: AtomicBool::new(config.success_cannot_open()),
            slot_ns,
            slots: std::array::from_fn(|_| Slot::empty()),
            inner: Mutex::new(Inner {
                state: BreakerState::Closed,
                consecutive: 0,
                probes_out: 0,
                probes_ok: 0,
            }),
        }
    }

    /// Leave to call the store, or `None` while the breaker is open (or
    /// half-open with all its probes out).
    #[inline]
    pub fn try_call(&self) -> Option<CallPermit> {
        if self.calm.load(Ordering::Acquire) {
            return Some(CallPermit { probe: false });
        }
        let until = self.open_until.load(Ordering::Acquire);
        if until != 0 && self.clock.now() < until {
            return None;
        }
        self.try_call_slow()
    }

    fn try_call_slow(&self) -> Option<CallPermit> {
        let mut inner = self.inner.lock();
        match inner.state {
            BreakerState::Closed => Some(CallPermit { probe: false }),
            BreakerState::Open => {
                if self.clock.now() < self.open_until.load(Ordering::Acquire) {
                    return None;
                }
                self.transition(&mut inner, BreakerState::HalfOpen);
                inner.probes_out = 1;
                Some(CallPermit { probe: true })
            }
            BreakerState::HalfOpen if inner.probes_out < self.config.probes => {
                inner.probes_out += 1;
                Some(CallPermit { probe: true })
            }
            BreakerState::HalfOpen => None,
        }
    }

    /// Records how the call `permit` allowed went: `ok` false for a failure
    /// of the store (timeout, unavailable), true for any answer.
    pub fn record(&self, permit: CallPermit, ok: bool) {
        if ok && !permit.probe && self.calm.load(Ordering::Acquire) && self.count_calm() {
            return;
        }
        let mut inner = self.inner.lock();
        if permit.probe {
            if inner.state != BreakerState::HalfOpen {
                return;
            }
            if !ok {
                self.open(&mut inner);
            } else {
                inner.probes_ok += 1;
                if inner.probes_ok >= self.config.probes {
                    self.transition(&mut inner, BreakerState::Closed);
                }
            }
            return;
        }
        if inner.state != BreakerState::Closed {
            return;
        }
        inner.consecutive = if ok { 0 } else { inner.consecutive + 1 };
        let (calls, failures) = self.count(ok);
        let by_streak = self.config.consecutive > 0 && inner.consecutive >= self.config.consecutive;
        let by_ratio = calls >= self.config.min_calls
            && f64::from(failures) >= self.config.ratio * f64::from(calls);
        if by_streak || by_ratio {
            self.open(&mut inner);
        } else {
            let calm = inner.consecutive == 0 && failures == 0 && self.config.success_cannot_open();
            self.calm.store(calm, Ordering::Release);
        }
    }

    /// Counts a calm success in the window without the lock, if its slot
    /// has been started; false if the slot is to be started (under the
    /// lock, by [`Self::count`]).
    fn count_calm(&self) -> bool {
        let (slot, counted) = self.current_slot();
        // Acquire: a slot started again is seen with its counts cleared.
        if counted.index.load(Ordering::Acquire) != slot {
            return false;
        }
        counted.calls.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Where the breaker is now (an open breaker whose time is up reports
    /// `Open` until the next call half-opens it).
    pub fn state(&self) -> BreakerState {
        self.inner.lock().state
    }

    /// The clock the breaker runs on.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The name given at construction.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The window's slot of this moment, with where it is counted.
    fn current_slot(&self) -> (u64, &Slot) {
        let slot = self.clock.now() / self.slot_ns;
        (slot, &self.slots[(slot % WINDOW_SLOTS) as usize])
    }

    /// Adds the call to the window and returns the window's calls and
    /// failures. Under the lock: only this starts a slot again.
    fn count(&self, ok: bool) -> (u32, u32) {
        let (slot, counted) = self.current_slot();
        if counted.index.load(Ordering::Relaxed) != slot {
            counted.calls.store(0, Ordering::Relaxed);
            counted.failures.store(0, Ordering::Relaxed);
            // Release: a calm success that sees the new index counts on
            // the cleared slot.
            counted.index.store(slot, Ordering::Release);
        }
        counted.calls.fetch_add(1, Ordering::Relaxed);
        if !ok {
            counted.failures.fetch_add(1, Ordering::Relaxed);
        }
        self.slots
            .iter()
            // A slot never started (`u64::MAX`) is no age at all.
            .filter(|s| {
                slot.checked_sub(s.index.load(Ordering::Acquire))
                    .is_some_and(|age| age < WINDOW_SLOTS)
            })
            .fold((0, 0), |(c, f), s| {
                (
                    c + s.calls.load(Ordering::Relaxed),
                    f + s.failures.load(Ordering::Relaxed),
                )
            })
    }

    fn open(&self, inner: &mut Inner) {
        let until = self
            .clock
            .now()
            .saturating_add(u64::try_from(self.config.open_for.as_nanos()).unwrap_or(u64::MAX))
            .max(1);
        self.open_until.store(until, Ordering::Release);
        self.transition(inner, BreakerState::Open);
    }

    fn transition(&self, inner: &mut Inner, to: BreakerState) {
        let from = inner.state;
        inner.state = to;
        inner.consecutive = 0;
        inner.probes_out = 0;
        inner.probes_ok = 0;
        if to == BreakerState::Closed {
            for slot in &self.slots {
                slot.clear();
            }
            self.open_until.store(0, Ordering::Release);
            self.calm
                .store(self.config.success_cannot_open(), Ordering::Release);
        } else {
            self.calm.store(false, Ordering::Release);
        }
        if to == BreakerState::Open {
            tracing::warn!(target: "tollgate::breaker", store = %self.name, from = from.as_str(), "circuit opened: the store is not called until it is probed");
        } else {
            tracing::info!(target: "tollgate::breaker", store = %self.name, from = from.as_str(), to = to.as_str(), "circuit state changed");
        }
        metrics::counter!(
            "tollgate_breaker_transitions_total",
            "store" => self.name.clone(),
            "to" => to.as_str()
        )
        .increment(1);
        // 0 closed, 1 half-open, 2 open: where the breaker is, between
        // transitions.
        let level = match to {
            BreakerState::Closed => 0.0,
            BreakerState::HalfOpen => 1.0,
            BreakerState::Open => 2.0,
        };
        metrics::gauge!("tollgate_breaker_state", "store" => self.name.clone()).set(level);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FakeClock;

    fn fail(b: &Breaker<FakeClock>, n: u32) {
        for _ in 0..n {
            let p = b.try_call().expect("closed");
            b.record(p, false);
        }
    }

    #[test]
    fn opens_after_consecutive_failures_and_a_success_resets_the_streak() {
        let clock = FakeClock::new();
        let b = Breaker::new("s", BreakerConfig::default().consecutive(3), clock);
        fail(&b, 2);
        let p = b.try_call().unwrap();
        b.record(p, true);
        fail(&b, 2);
        assert_eq!(b.state(), BreakerState::Closed);
        fail(&b, 1);
        assert_eq!(b.state(), BreakerState::Open);
        assert!(b.try_call().is_none());
    }

    #[test]
    fn opens_on_the_failure_ratio_within_the_window_only() {
        let clock = FakeClock::new();
        let config =
            BreakerConfig::default()
                .consecutive(0)
                .failure_ratio(0.5, 10, Duration::from_secs(10));
        let b = Breaker::new("s", config, clock.clone());
        // Alternating outcomes: never 2 failures in a row, half failing.
        for i in 0..9 {
            let p = b.try_call().unwrap();
            b.record(p, i % 2 == 1);
        }
        assert_eq!(b.state(), BreakerState::Closed, "9 calls < min_calls");
        // The window moves on: the old calls no longer count.
        clock.advance(Duration::from_secs(11));
        for i in 0..9 {
            let p = b.try_call().unwrap();
            b.record(p, i % 3 != 0);
        }
        assert_eq!(b.state(), BreakerState::Closed, "3 of 9 failed");
        fail(&b, 2);
        assert_eq!(b.state(), BreakerState::Closed, "5 of 11 failed");
        fail(&b, 1);
        assert_eq!(b.state(), BreakerState::Open, "6 of 12 failed");
    }

    #[test]
    fn half_opens_after_open_for_and_closes_after_the_probes_succeed() {
        let clock = FakeClock::new();
        let config = BreakerConfig::default()
            .consecutive(1)
            .open_for(Duration::from_millis(500))
            .probes(2);
        let b = Breaker::new("s", config, clock.clone());
        fail(&b, 1);
        clock.advance(Duration::from_millis(499));
        assert!(b.try_call().is_none(), "still open");
        clock.advance(Duration::from_millis(1));
        let p1 = b.try_call().expect("first probe");
        assert_eq!(b.state(), BreakerState::HalfOpen);
        let p2 = b.try_call().expect("second probe");
        assert!(b.try_call().is_none(), "only two probes at once");
        b.record(p1, true);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        b.record(p2, true);
        assert_eq!(b.state(), BreakerState::Closed);
        assert!(b.try_call().is_some());
    }

    #[test]
    fn a_failed_probe_opens_again_for_a_full_period() {
        let clock = FakeClock::new();
        let config = BreakerConfig::default()
            .consecutive(1)
            .open_for(Duration::from_secs(1));
        let b = Breaker::new("s", config, clock.clone());
        fail(&b, 1);
        clock.advance(Duration::from_secs(1));
        let probe = b.try_call().unwrap();
        b.record(probe, false);
        assert_eq!(b.state(), BreakerState::Open);
        clock.advance(Duration::from_millis(999));
        assert!(b.try_call().is_none());
        clock.advance(Duration::from_millis(1));
        assert!(b.try_call().is_some());
    }

    /// Successes recorded without the lock, from several threads, are
    /// counted exactly: the ratio rule then opens at the very failure that
    /// makes half the window's calls fail, not before.
    #[test]
    fn calm_successes_from_many_threads_all_count_in_the_window() {
        let clock = FakeClock::new();
        let config =
            BreakerConfig::default()
                .consecutive(0)
                .failure_ratio(0.5, 10, Duration::from_secs(10));
        let b = Breaker::new("s", config, clock);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1_000 {
                        let p = b.try_call().expect("closed");
                        b.record(p, true);
                    }
                });
            }
        });
        assert!(b.calm.load(Ordering::Relaxed), "no failure yet");
        fail(&b, 3_999);
        assert!(!b.calm.load(Ordering::Relaxed), "failures counted");
        assert_eq!(b.state(), BreakerState::Closed, "3,999 of 7,999 failed");
        fail(&b, 1);
        assert_eq!(b.state(), BreakerState::Open, "4,000 of 8,000 failed");
    }

    /// After failures, successes go through the lock again (they end the
    /// streak) until the failures have left the window.
    #[test]
    fn calm_again_once_the_failures_leave_the_window() {
        let clock = FakeClock::new();
        let config = BreakerConfig::default().consecutive(3).failure_ratio(
            0.5,
            100,
            Duration::from_secs(10),
        );
        let b = Breaker::new("s", config, clock.clone());
        fail(&b, 2);
        let p = b.try_call().unwrap();
        b.record(p, true);
        assert!(
            !b.calm.load(Ordering::Relaxed),
            "two failures in the window"
        );
        fail(&b, 2);
        assert_eq!(
            b.state(),
            BreakerState::Closed,
            "the success ended the streak"
        );
        clock.advance(Duration::from_secs(11));
        let p = b.try_call().unwrap();
        b.record(p, true);
        assert!(
            b.calm.load(Ordering::Relaxed),
            "the window holds no failure"
        );
        fail(&b, 3);
        assert_eq!(b.state(), BreakerState::Open);
        assert!(!b.calm.load(Ordering::Relaxed));
    }

    /// A ratio of 0 opens on any `min_calls` calls, successes included: no
    /// success goes without the lock then.
    #[test]
    fn a_zero_ratio_opens_on_successes_as_before() {
        let clock = FakeClock::new();
        let config =
            BreakerConfig::default()
                .consecutive(0)
                .failure_ratio(0.0, 3, Duration::from_secs(10));
        let b = Breaker::new("s", config, clock);
        for _ in 0..3 {
            let p = b.try_call().unwrap();
            b.record(p, true);
        }
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn a_late_outcome_from_before_opening_changes_nothing() {
        let clock = FakeClock::new();
        let b = Breaker::new("s", BreakerConfig::default().consecutive(1), clock);
        let late = b.try_call().unwrap();
        fail(&b, 1);
        b.record(late, true);
        assert_eq!(b.state(), BreakerState::Open);
    }
}
