//! [`Paces`]: per key, when the next request may leave, from the caller's
//! own rate and what the server's answers said about theirs.
//!
//! Every request takes a slot one interval after the previous one, so
//! requests waiting together leave one by one, never at once. The interval
//! is the slower of the caller's policy and the rate the server announces
//! in its answers (plus a headroom). When the server's last word says
//! nothing is left, a new request also waits for the tokens the requests
//! still in flight will take.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tollgate::Policy;

use super::shape::nanos;
use crate::learn::Learned;

/// What the pacer knows of one key.
#[derive(Debug, Default)]
struct Pace {
    /// The server's interval with headroom (ns); 0 until announced.
    server: u64,
    /// The earliest time (ns on the clock) the next request may leave.
    next: u64,
    /// Units the server has left by its last answer, less the requests
    /// sent or in flight since; `None` until a server says.
    left: Option<u64>,
    /// When the last answer came (ns on the clock).
    answered: u64,
    /// Requests sent and not answered yet.
    in_flight: u64,
    /// Refusals (429 or 503) in a row.
    refusals: u32,
}

/// The pacing state of every key, and how it paces.
#[derive(Debug)]
pub(crate) struct Paces {
    keys: Mutex<Keys>,
    /// The caller's own interval (ns): its policy's slowest limit.
    own: u64,
    /// Percent added to the server's interval.
    headroom: u64,
    /// Whether a key may go ahead of its interval while the server reports
    /// units left (its burst).
    bursts: bool,
}

/// The fields' resolution: whole seconds, so a told wait of one second or
/// less means "some time within the next second".
const RESOLUTION: u64 = 1_000_000_000;

/// tokio's timer wakes on whole milliseconds.
const TIMER_RESOLUTION: u64 = 1_000_000;

/// The headroom by default, percent.
pub(crate) const DEFAULT_HEADROOM: u64 = 5;

impl Paces {
    /// Pacing at `policy`'s slowest rate, no bursts, the default headroom.
    pub(crate) fn new(policy: &Policy) -> Self {
        let own = policy
            .limits()
            .iter()
            .map(|l| l.quota.period_ns() / l.quota.limit().max(1))
            .max()
            .unwrap_or(0);
        Paces {
            keys: Mutex::new(Keys::default()),
            own,
            headroom: DEFAULT_HEADROOM,
            bursts: false,
        }
    }

    pub(crate) fn set_bursts(&mut self, bursts: bool) {
        self.bursts = bursts;
    }

    pub(crate) fn set_headroom(&mut self, percent: u64) {
        self.headroom = percent;
    }

    /// Lets a request of `key` go now if its pace allows, counting it in
    /// flight until [`Paces::done`]; otherwise changes nothing and returns
    /// the earliest time it could go, to be asked again then.
    pub(crate) fn take(&self, key: &str, now: u64) -> Result<(), u64> {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let pace = keys.entry(key, now);
        let interval = self.own.max(pace.server);
        let spent = pace.left == Some(0);
        let mut slot = if self.bursts && !spent {
            now
        } else {
            now.max(pace.next)
        };
        if spent {
            // The server's next units go first to what is already out.
            let held = pace
                .answered
                .saturating_add(interval.saturating_mul(pace.in_flight.saturating_add(1)));
            slot = slot.max(held);
        }
        if slot > now {
            return Err(slot);
        }
        // A timer that woke a little late does not slow the pace: up to a
        // quarter interval of lateness, or the timer's resolution, is made
        // up on the next slots (at thousands a second, the slots of one
        // millisecond go together).
        let slack = (interval / 4).max(TIMER_RESOLUTION);
        pace.next = pace
            .next
            .max(now.saturating_sub(slack))
            .saturating_add(interval);
        pace.left = pace.left.map(|l| l.saturating_sub(1));
        pace.in_flight += 1;
        Ok(())
    }

    /// A request of `key` taken by [`Paces::take`] is answered (or
    /// failed, `learned` then `None`) at `now`. Returns the pause the
    /// answer calls for: `learned`'s, except that a wait of at most the
    /// fields' resolution from a server whose rate is known becomes that
    /// rate's interval (doubling with each refusal in a row), or no pause
    /// for an admitted request (its spent budget holds the key back in
    /// [`Paces::take`]).
    pub(crate) fn done(
        &self,
        key: &str,
        now: u64,
        refused: bool,
        learned: Option<&Learned>,
    ) -> Option<Duration> {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let pace = keys.map.get_mut(key)?;
        pace.in_flight = pace.in_flight.saturating_sub(1);
        let learned = learned?;
        if let Some(interval) = learned.interval {
            pace.server = nanos(interval).saturating_mul(100 + self.headroom) / 100;
        }
        if let Some(remaining) = learned.remaining {
            pace.left = Some(remaining.saturating_sub(pace.in_flight));
            pace.answered = now;
        }
        pace.refusals = if refused {
            pace.refusals.saturating_add(1)
        } else {
            0
        };
        let told = learned.pause()?;
        if pace.server == 0 || nanos(told) > RESOLUTION {
            return Some(told);
        }
        if !refused {
            return None;
        }
        let doubling = 1u64.checked_shl(pace.refusals - 1).unwrap_or(u64::MAX);
        Some(told.min(Duration::from_nanos(pace.server.saturating_mul(doubling))))
    }
}

/// The keys' paces, forgetting keys idle for [`IDLE`] once the map has
/// doubled since the last sweep, so it holds about the keys in use.
#[derive(Debug, Default)]
struct Keys {
    map: HashMap<String, Pace>,
    sweep_at: usize,
}

/// A key unused this long is forgotten (what it learned too).
const IDLE: u64 = 600 * RESOLUTION;

impl Keys {
    fn entry(&mut self, key: &str, now: u64) -> &mut Pace {
        if !self.map.contains_key(key) && self.map.len() >= self.sweep_at {
            self.map
                .retain(|_, p| p.in_flight > 0 || p.next.saturating_add(IDLE) > now);
            self.sweep_at = (self.map.len() * 2).max(64);
        }
        self.map.entry(key.to_string()).or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{Algorithm, Limit, Quota};

    const MS: u64 = 1_000_000;

    /// A caller's policy of 1000 a second: the server's rate decides.
    fn paces() -> Paces {
        let own = Limit::new(Algorithm::Gcra, Quota::per_second(1000).unwrap());
        let mut paces = Paces::new(&Policy::new(own));
        paces.set_headroom(0);
        paces
    }

    /// 10 a second, with `r` left.
    fn answer(r: u64, retry_after: Option<u64>) -> Learned {
        Learned {
            remaining: Some(r),
            retry_after: retry_after.map(Duration::from_secs),
            spent_for: (r == 0).then_some(Duration::from_secs(1)),
            interval: Some(Duration::from_millis(100)),
        }
    }

    #[test]
    fn a_spent_budget_holds_back_one_interval_per_request_in_flight() {
        let p = paces();
        p.take("k", 0).unwrap();
        assert_eq!(p.done("k", 0, false, Some(&answer(5, None))), None);
        // Three go out one interval apart (the first at once: its slot was
        // set before the rate was known); the first answer says none is left.
        p.take("k", MS).unwrap();
        for at in [101, 201] {
            assert_eq!(p.take("k", at * MS - 1), Err(at * MS));
            p.take("k", at * MS).unwrap();
        }
        assert_eq!(p.done("k", 210 * MS, false, Some(&answer(0, None))), None);
        // Two still out take the next two units: the next waits for the third.
        assert_eq!(p.take("k", 300 * MS), Err(510 * MS));
        p.take("k", 510 * MS).unwrap();
    }

    #[test]
    fn a_high_rate_is_kept_at_the_timer_resolution() {
        // 10,000 a second: a waiter woken on the next millisecond finds the
        // ten slots of that millisecond, not one.
        let own = Limit::new(Algorithm::Gcra, Quota::per_second(10_000).unwrap());
        let p = Paces::new(&Policy::new(own));
        p.take("k", 0).unwrap();
        let taken = (0..20).filter(|_| p.take("k", MS).is_ok()).count();
        assert_eq!(taken, 10);
    }

    #[test]
    fn refusals_in_a_row_double_the_short_pause_up_to_the_second() {
        let p = paces();
        let mut pauses = Vec::new();
        for _ in 0..6 {
            p.take("k", 0).ok();
            pauses.push(p.done("k", 0, true, Some(&answer(0, Some(1)))));
        }
        let ms = |n| Some(Duration::from_millis(n));
        assert_eq!(
            pauses,
            [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
        // An admission ends the run; a longer wait is taken as told.
        p.take("k", 0).ok();
        assert_eq!(p.done("k", 0, false, Some(&answer(3, None))), None);
        p.take("k", 0).ok();
        assert_eq!(p.done("k", 0, true, Some(&answer(0, Some(7)))), ms(7000));
    }
}
