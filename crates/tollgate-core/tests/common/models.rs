//! Reference models written from `SPEC.md` alone, deliberately naive: the
//! windows keep every admitted request and rescan it, the buckets and the
//! queue keep their quantities as exact rationals. Slow, but each is a
//! direct reading of its admission rule, so agreeing with them decision for
//! decision is evidence the core's integer shortcuts are right.

use tollgate_core::{Algorithm, Decision, Quota, RetryAfter};

use super::ratio::Ratio;

/// One algorithm's rule over its own state; times are already clamped to
/// the key's last charge, and costs are above 0 and able to fit.
trait Rule {
    /// `Decision.limit`.
    fn capacity(&self) -> u64;
    /// Whether `cost` can never fit.
    fn never(&self, cost: u64) -> bool;
    /// The admission rule at `now`.
    fn admits(&self, now: u64, cost: u64) -> bool;
    /// Records an admitted request, or a forced one whatever the state.
    fn charge(&mut self, now: u64, cost: u64);
    /// The smallest wait after which a denied request fits.
    fn retry_after(&self, now: u64, cost: u64) -> u64;
    /// The largest cost that fits at `now`.
    fn remaining(&self, now: u64) -> u64;
    /// Time until the key is back to its initial state.
    fn reset_after(&self, now: u64) -> u64;
    /// Release delay of a request admitted at `now` (queue only).
    fn delay(&self, _now: u64) -> u64 {
        0
    }
}

/// A reference model of one key: SPEC's common rules (clock clamp, peeks,
/// `never`) around one algorithm's [`Rule`].
pub struct Model {
    rule: Box<dyn Rule>,
    last: u64,
}

impl Model {
    /// A fresh key of `algorithm` under `quota`.
    pub fn new(algorithm: Algorithm, quota: &Quota) -> Self {
        let q = *quota;
        let rule: Box<dyn Rule> = match algorithm {
            Algorithm::FixedWindow => Box::new(FixedWindow { q, log: Vec::new() }),
            Algorithm::SlidingLog => Box::new(SlidingLog { q, log: Vec::new() }),
            Algorithm::SlidingCounter => Box::new(SlidingCounter { q, log: Vec::new() }),
            Algorithm::TokenBucket | Algorithm::LeakyBucket => Box::new(Tokens {
                q,
                tokens: Ratio::int(q.burst()),
                owed: Ratio::ZERO,
                at: 0,
            }),
            Algorithm::Gcra => Box::new(Gcra {
                q,
                tat: Ratio::ZERO,
            }),
            Algorithm::LeakyQueue => Box::new(Queue {
                q,
                next_free: Ratio::ZERO,
            }),
        };
        Model { rule, last: 0 }
    }

    /// Decides a request exactly as SPEC.md describes.
    pub fn decide(&mut self, now: u64, cost: u64) -> Decision {
        let now = now.max(self.last);
        let r = &mut self.rule;
        let (allowed, retry_after, delay) = if cost == 0 {
            (true, RetryAfter::Now, 0)
        } else if r.never(cost) {
            (false, RetryAfter::Never, 0)
        } else if r.admits(now, cost) {
            let delay = r.delay(now);
            r.charge(now, cost);
            self.last = now;
            (true, RetryAfter::Now, delay)
        } else {
            (false, RetryAfter::After(r.retry_after(now, cost)), 0)
        };
        Decision {
            allowed,
            limit: r.capacity(),
            remaining: r.remaining(now),
            retry_after,
            reset_after: r.reset_after(now),
            delay,
        }
    }
}

impl Model {
    /// Charges `cost` whatever the state (SPEC's `force`) and reports the
    /// key's numbers after it.
    pub fn force(&mut self, now: u64, cost: u64) -> Decision {
        let now = now.max(self.last);
        if cost > 0 {
            self.rule.charge(now, cost);
            self.last = now;
        }
        self.decide(now, 0)
    }
}

fn to_u64(v: u128) -> u64 {
    u64::try_from(v).expect("reference model result beyond u64")
}

/// The emission interval `period / limit`.
fn emission(q: &Quota) -> Ratio {
    Ratio::new(q.period_ns() as u128, q.limit() as u128)
}

/// Smallest `x` in `lo..=hi` with `ok(x)`, for `ok` false then true.
fn first_true(mut lo: u128, mut hi: u128, ok: impl Fn(u128) -> bool) -> u128 {
    assert!(ok(hi), "search range too short");
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// Every admitted request, counted per aligned window on each question.
struct FixedWindow {
    q: Quota,
    log: Vec<(u64, u64)>,
}

impl FixedWindow {
    fn count(&self, now: u64) -> u64 {
        let p = self.q.period_ns();
        self.log
            .iter()
            .filter(|(t, _)| t / p == now / p)
            .map(|(_, c)| c)
            .sum()
    }

    fn to_window_end(&self, now: u64) -> u64 {
        self.q.period_ns() - now % self.q.period_ns()
    }
}

impl Rule for FixedWindow {
    fn capacity(&self) -> u64 {
        self.q.limit()
    }
    fn never(&self, cost: u64) -> bool {
        cost > self.q.limit()
    }
    fn admits(&self, now: u64, cost: u64) -> bool {
        self.count(now) + cost <= self.q.limit()
    }
    fn charge(&mut self, now: u64, cost: u64) {
        self.log.push((now, cost));
    }
    fn retry_after(&self, now: u64, _cost: u64) -> u64 {
        self.to_window_end(now)
    }
    fn remaining(&self, now: u64) -> u64 {
        self.q.limit().saturating_sub(self.count(now))
    }
    fn reset_after(&self, now: u64) -> u64 {
        if self.count(now) > 0 {
            self.to_window_end(now)
        } else {
            0
        }
    }
}

/// Every admitted request; the window `(now - period, now]` is rescanned.
struct SlidingLog {
    q: Quota,
    log: Vec<(u64, u64)>,
}

impl SlidingLog {
    /// Leave time of each request still in the window at `now`, with its cost.
    fn live(&self, now: u128) -> impl Iterator<Item = (u128, u64)> + '_ {
        let p = self.q.period_ns() as u128;
        self.log
            .iter()
            .map(move |&(t, c)| (t as u128 + p, c))
            .filter(move |&(leaves, _)| leaves > now)
    }

    fn sum(&self, now: u128) -> u64 {
        self.live(now).map(|(_, c)| c).sum()
    }
}

impl Rule for SlidingLog {
    fn capacity(&self) -> u64 {
        self.q.limit()
    }
    fn never(&self, cost: u64) -> bool {
        cost > self.q.limit()
    }
    fn admits(&self, now: u64, cost: u64) -> bool {
        self.sum(now as u128) + cost <= self.q.limit()
    }
    fn charge(&mut self, now: u64, cost: u64) {
        self.log.push((now, cost));
    }
    fn retry_after(&self, now: u64, cost: u64) -> u64 {
        let now = now as u128;
        let mut leaves: Vec<u128> = self.live(now).map(|(l, _)| l).collect();
        leaves.sort_unstable();
        let at = leaves
            .into_iter()
            .find(|&l| self.sum(l) + cost <= self.q.limit())
            .expect("the window empties eventually");
        to_u64(at - now)
    }
    fn remaining(&self, now: u64) -> u64 {
        self.q.limit().saturating_sub(self.sum(now as u128))
    }
    fn reset_after(&self, now: u64) -> u64 {
        let now = now as u128;
        self.live(now)
            .map(|(l, _)| to_u64(l - now))
            .max()
            .unwrap_or(0)
    }
}

/// Every admitted request; window counts are recomputed on each question
/// and the waits found by searching time, not by solving the formula.
struct SlidingCounter {
    q: Quota,
    log: Vec<(u64, u64)>,
}

impl SlidingCounter {
    /// (previous window's count, current window's count, elapsed) at `now`.
    fn counts(&self, now: u128) -> (u128, u128, u128) {
        let p = self.q.period_ns() as u128;
        let w = now / p;
        let count = |window: u128| -> u128 {
            self.log
                .iter()
                .filter(|(t, _)| *t as u128 / p == window)
                .map(|&(_, c)| c as u128)
                .sum()
        };
        let prev = if w == 0 { 0 } else { count(w - 1) };
        (prev, count(w), now - w * p)
    }

    /// SPEC's rule: `prev*(period - elapsed) + (curr + cost)*period <= limit*period`.
    fn fits(&self, now: u128, cost: u128) -> bool {
        let p = self.q.period_ns() as u128;
        let (prev, curr, elapsed) = self.counts(now);
        prev * (p - elapsed) + (curr + cost) * p <= self.q.limit() as u128 * p
    }

    fn horizon(&self) -> u128 {
        2 * self.q.period_ns() as u128
    }
}

impl Rule for SlidingCounter {
    fn capacity(&self) -> u64 {
        self.q.limit()
    }
    fn never(&self, cost: u64) -> bool {
        cost > self.q.limit()
    }
    fn admits(&self, now: u64, cost: u64) -> bool {
        self.fits(now as u128, cost as u128)
    }
    fn charge(&mut self, now: u64, cost: u64) {
        self.log.push((now, cost));
    }
    fn retry_after(&self, now: u64, cost: u64) -> u64 {
        let now = now as u128;
        to_u64(first_true(1, self.horizon(), |d| {
            self.fits(now + d, cost as u128)
        }))
    }
    fn remaining(&self, now: u64) -> u64 {
        let limit = self.q.limit() as u128;
        if !self.fits(now as u128, 0) {
            // Over the limit after a forced charge: nothing fits.
            return 0;
        }
        // The largest fitting cost is one below the smallest that does not.
        let first_misfit = first_true(0, limit + 1, |c| c > limit || !self.fits(now as u128, c));
        to_u64(first_misfit - 1)
    }
    fn reset_after(&self, now: u64) -> u64 {
        let now = now as u128;
        to_u64(first_true(0, self.horizon(), |d| {
            let (prev, curr, _) = self.counts(now + d);
            prev == 0 && curr == 0
        }))
    }
}

/// The literal token bucket: a rational number of tokens that refills at
/// `limit / period` up to `burst`; starts full. A forced charge beyond the
/// tokens held leaves the rest `owed`, which the refill repays first.
struct Tokens {
    q: Quota,
    tokens: Ratio,
    owed: Ratio,
    at: u64,
}

impl Tokens {
    /// (tokens, owed) at `now`: at most one of them is not zero.
    fn level(&self, now: u64) -> (Ratio, Ratio) {
        let refill = Ratio::new(
            (now - self.at) as u128 * self.q.limit() as u128,
            self.q.period_ns() as u128,
        );
        if refill < self.owed {
            return (Ratio::ZERO, self.owed.sub(refill));
        }
        let tokens = self.tokens.add(refill.sub(self.owed));
        (tokens.min(Ratio::int(self.q.burst())), Ratio::ZERO)
    }

    /// Time to refill `missing` tokens, rounded up.
    fn refill_time(&self, missing: Ratio) -> u64 {
        to_u64(missing.mul(emission(&self.q)).ceil())
    }
}

impl Rule for Tokens {
    fn capacity(&self) -> u64 {
        self.q.burst()
    }
    fn never(&self, cost: u64) -> bool {
        cost > self.q.burst()
    }
    fn admits(&self, now: u64, cost: u64) -> bool {
        self.level(now).0 >= Ratio::int(cost)
    }
    fn charge(&mut self, now: u64, cost: u64) {
        let (tokens, owed) = self.level(now);
        let cost = Ratio::int(cost);
        (self.tokens, self.owed) = if tokens >= cost {
            (tokens.sub(cost), owed)
        } else {
            (Ratio::ZERO, owed.add(cost.sub(tokens)))
        };
        self.at = now;
    }
    fn retry_after(&self, now: u64, cost: u64) -> u64 {
        let (tokens, owed) = self.level(now);
        self.refill_time(Ratio::int(cost).add(owed).sub(tokens))
    }
    fn remaining(&self, now: u64) -> u64 {
        to_u64(self.level(now).0.floor())
    }
    fn reset_after(&self, now: u64) -> u64 {
        let (tokens, owed) = self.level(now);
        self.refill_time(Ratio::int(self.q.burst()).add(owed).sub(tokens))
    }
}

/// GCRA as SPEC states it: a rational theoretical arrival time in ns.
struct Gcra {
    q: Quota,
    tat: Ratio,
}

impl Gcra {
    /// `max(TAT, now) - now`: the tolerance in use.
    fn used(&self, now: u64) -> Ratio {
        self.tat.max(Ratio::int(now)).sub(Ratio::int(now))
    }

    fn tolerance(&self) -> Ratio {
        Ratio::int(self.q.burst()).mul(emission(&self.q))
    }
}

impl Rule for Gcra {
    fn capacity(&self) -> u64 {
        self.q.burst()
    }
    fn never(&self, cost: u64) -> bool {
        cost > self.q.burst()
    }
    fn admits(&self, now: u64, cost: u64) -> bool {
        let t = emission(&self.q);
        self.used(now).add(Ratio::int(cost).mul(t)) <= self.tolerance()
    }
    fn charge(&mut self, now: u64, cost: u64) {
        let t = emission(&self.q);
        self.tat = self.tat.max(Ratio::int(now)).add(Ratio::int(cost).mul(t));
    }
    fn retry_after(&self, now: u64, cost: u64) -> u64 {
        let t = emission(&self.q);
        let over = self.used(now).add(Ratio::int(cost).mul(t));
        to_u64(over.sub(self.tolerance()).ceil())
    }
    fn remaining(&self, now: u64) -> u64 {
        let t = emission(&self.q);
        to_u64(
            self.tolerance()
                .saturating_sub(self.used(now))
                .div(t)
                .floor(),
        )
    }
    fn reset_after(&self, now: u64) -> u64 {
        to_u64(self.used(now).ceil())
    }
}

/// The shaper as SPEC states it: `start = max(next_free, now)`; admit iff
/// `(start - now) + (cost-1)*T <= burst*T`; then `next_free = start + cost*T`.
struct Queue {
    q: Quota,
    next_free: Ratio,
}

impl Queue {
    fn wait(&self, now: u64) -> Ratio {
        self.next_free.max(Ratio::int(now)).sub(Ratio::int(now))
    }

    /// `(wait + (cost - 1)*T) - burst*T`, clamped at 0.
    fn overflow(&self, now: u64, cost: u64) -> Ratio {
        let t = emission(&self.q);
        let queued = self.wait(now).add(Ratio::int(cost - 1).mul(t));
        queued.saturating_sub(Ratio::int(self.q.burst()).mul(t))
    }
}

impl Rule for Queue {
    fn capacity(&self) -> u64 {
        self.q.burst() + 1
    }
    fn never(&self, cost: u64) -> bool {
        cost - 1 > self.q.burst()
    }
    fn admits(&self, now: u64, cost: u64) -> bool {
        let t = emission(&self.q);
        let queued = self.wait(now).add(Ratio::int(cost - 1).mul(t));
        queued <= Ratio::int(self.q.burst()).mul(t)
    }
    fn delay(&self, now: u64) -> u64 {
        to_u64(self.wait(now).ceil())
    }
    fn charge(&mut self, now: u64, cost: u64) {
        let start = self.next_free.max(Ratio::int(now));
        self.next_free = start.add(Ratio::int(cost).mul(emission(&self.q)));
    }
    fn retry_after(&self, now: u64, cost: u64) -> u64 {
        to_u64(self.overflow(now, cost).ceil())
    }
    fn remaining(&self, now: u64) -> u64 {
        // The largest `c` with `wait + (c - 1)*T <= burst*T`.
        let t = emission(&self.q);
        let room = Ratio::int(self.q.burst() + 1).mul(t);
        to_u64(room.saturating_sub(self.wait(now)).div(t).floor())
    }
    fn reset_after(&self, now: u64) -> u64 {
        to_u64(self.wait(now).ceil())
    }
}
