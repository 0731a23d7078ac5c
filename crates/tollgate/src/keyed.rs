//! The per-key table of one policy: look a key up under its shard's lock,
//! read the clock, let the core decide, and keep the table bounded.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use tollgate_core::{Decision, Lease, LeaseError, RetryAfter};

use crate::limiter::{LimiterFull, OnFull, WaitError};
use crate::rules::Rules;
use crate::sharded::{Located, Probe, ShardedMap, Sizing};
use crate::Clock;

/// Before a shard's table grows, the sweep looks at up to 1/`GROWTH_SWEEP`
/// of its buckets for idle keys, and the table grows only if it found none.
/// It stops once it has dropped 1/`GROWTH_FREED` of the capacity: the next
/// that many new keys then need no sweep, so a new key costs at most about
/// 9 buckets looked at, and nothing while the table has room.
const GROWTH_SWEEP: usize = 8;
/// See [`GROWTH_SWEEP`].
const GROWTH_FREED: usize = 64;
/// Buckets searched for an idle key to evict when the table is full.
const EVICT_SCAN: usize = 64;

/// An operation on a key's state at a time: its result and whether it
/// charged the key.
type Op<'a, S, T> = dyn Fn(&mut S, u64) -> (T, bool) + 'a;

/// How many keys the table may hold and what happens to a new key beyond.
pub(crate) struct Bounds {
    pub(crate) max_keys: usize,
    pub(crate) on_full: OnFull,
    /// The `retry_after` (ns) of a denial for want of room.
    pub(crate) full_retry: u64,
    /// How long (ns) a key must have been idle before a sweep drops it
    /// (eviction for room under `max_keys` takes any idle key).
    pub(crate) idle_grace: u64,
    /// Keys held, over all shards (changed only when a key comes or goes).
    pub(crate) keys: AtomicUsize,
}

/// The keys of one policy and their states.
pub(crate) struct Keyed<K, R: Rules> {
    rules: R,
    map: ShardedMap<K, R::State>,
    /// The budget shared by the keys that could not be tracked, under
    /// [`OnFull::Shared`].
    overflow: Mutex<R::State>,
}

/// A charge made at a later time than now: the decision and when the
/// request may go.
pub(crate) struct Reserved {
    pub(crate) decision: Decision,
    pub(crate) ready_at: u64,
}

/// Adds one to `keys` unless it is at `max`: the count never goes past it,
/// not even for a moment.
fn count_in(keys: &AtomicUsize, max: usize) -> bool {
    keys.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
        (n < max).then_some(n + 1)
    })
    .is_ok()
}

impl<K: Hash + Eq, R: Rules> Keyed<K, R> {
    pub(crate) fn new(rules: R, sizing: Sizing) -> Self {
        Keyed {
            overflow: Mutex::new(rules.fresh()),
            rules,
            map: ShardedMap::new(sizing),
        }
    }

    /// Decides `cost` for `key` now. A new key is stored only if it was
    /// charged; a key beyond `max_keys` is handled by `bounds.on_full`.
    #[inline(always)]
    pub(crate) fn check<Q, C>(
        &self,
        key: &Q,
        cost: u64,
        clock: &C,
        bounds: &Bounds,
    ) -> Result<Decision, LimiterFull>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        C: Clock,
    {
        let probe = self.map.probe(key);
        if probe.reads_lock_free() && probe.peek_first() {
            if let Some(decision) = self.denial(&probe, key, cost, clock) {
                return Ok(decision);
            }
        }
        // `update`'s path, written out for the hottest operation: through
        // `update`'s closure the decision was compiled out of line.
        let mut located = probe.lock();
        let now = clock.now();
        if let Some(state) = located.get_mut(key) {
            let now = self.settle(state, now, clock);
            let (decision, charged) = self.decide_charged(state, now, cost);
            self.note_contention(&probe, &located, charged);
            return Ok(decision);
        }
        let decide = |state: &mut R::State, now| self.decide_charged(state, now, cost);
        self.update_new(&mut located, key, now, bounds, &decide)
    }

    /// [`Keyed::decide_held`], and whether it charged.
    #[inline(always)]
    fn decide_charged(&self, state: &mut R::State, now: u64, cost: u64) -> (Decision, bool) {
        let decision = self.decide_held(state, now, cost);
        (decision, decision.allowed && cost > 0)
    }

    /// Charges `cost` for `key` now whatever its state (the core's `force`).
    pub(crate) fn force<Q, C>(
        &self,
        key: &Q,
        cost: u64,
        clock: &C,
        bounds: &Bounds,
    ) -> Result<Decision, LimiterFull>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        C: Clock,
    {
        let force = |state: &mut R::State, now| (self.rules.force(state, now, cost), cost > 0);
        self.update(key, clock, bounds, &force)
    }

    /// Leases up to `max` units of `key` now (the core's `lease`). A key
    /// held by a reservation grants nothing until the reservation's time.
    pub(crate) fn lease<Q, C>(
        &self,
        key: &Q,
        max: u64,
        clock: &C,
        bounds: &Bounds,
    ) -> Result<Result<Lease, LeaseError>, LimiterFull>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        C: Clock,
    {
        let lease = |state: &mut R::State, now| {
            if self.rules.last_update(state) > now {
                let decision = self.decide_held(state, now, max.min(1));
                return (
                    Ok(Lease {
                        granted: 0,
                        decision,
                    }),
                    false,
                );
            }
            let lease = self.rules.lease(state, now, max);
            let charged = matches!(lease, Ok(Lease { granted, .. }) if granted > 0);
            (lease, charged)
        };
        self.update(key, clock, bounds, &lease)
    }

    /// The one lookup path of every operation that may charge (`check`
    /// writes it out): runs `op` on `key`'s state with the clock read under
    /// its shard's lock. `op` returns its result and whether it charged; a
    /// new key is stored only then, and a key beyond `max_keys` is handled
    /// by `bounds.on_full` (under [`OnFull::Shared`], `op` runs again on the
    /// shared overflow state).
    fn update<Q, C, T>(
        &self,
        key: &Q,
        clock: &C,
        bounds: &Bounds,
        op: &Op<'_, R::State, T>,
    ) -> Result<T, LimiterFull>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        C: Clock,
    {
        let probe = self.map.probe(key);
        let mut located = probe.lock();
        // Read under the lock: each key then sees its times in order.
        let now = clock.now();
        if let Some(state) = located.get_mut(key) {
            let now = self.settle(state, now, clock);
            let (out, charged) = op(state, now);
            self.note_contention(&probe, &located, charged);
            return Ok(out);
        }
        self.update_new(&mut located, key, now, bounds, op)
    }

    /// Threads taking turns on a key they are refused: lets the next denials
    /// in the shard skip its lock ([`Keyed::denial`]), until a charge is
    /// made (or [`Probe::peek`] finds nobody in the way).
    #[inline(always)]
    fn note_contention(
        &self,
        probe: &Probe<'_, K, R::State>,
        located: &Located<'_, K, R::State>,
        charged: bool,
    ) {
        if charged {
            probe.set_peek_first(false);
        } else if located.contended {
            probe.set_peek_first(true);
        }
    }

    /// [`Keyed::update`] for a key not stored yet. Inlined: out of line, the
    /// lock guard it borrows lived in memory and every check, stored key or
    /// not, measured half as slow again.
    #[inline(always)]
    fn update_new<Q, T>(
        &self,
        located: &mut Located<'_, K, R::State>,
        key: &Q,
        now: u64,
        bounds: &Bounds,
        op: &Op<'_, R::State, T>,
    ) -> Result<T, LimiterFull>
    where
        Q: ToOwned<Owned = K> + ?Sized,
    {
        let mut state = self.rules.fresh();
        let (out, charged) = op(&mut state, now);
        // Nothing changed: a fresh key needs no entry.
        if !charged || self.track(located, key, state, now, bounds) {
            return Ok(out);
        }
        match bounds.on_full {
            OnFull::Shared => Ok(op(&mut self.overflow.lock(), now).0),
            OnFull::AdmitUntracked => Ok(out),
            OnFull::Reject => Err(LimiterFull {
                max_keys: bounds.max_keys,
            }),
        }
    }

    /// The decision on a stored key if it is a denial or a peek, which
    /// change nothing, made from a copy of its state read without the
    /// shard's lock ([`Probe::peek`]): nothing is written to a line the
    /// other threads use, so threads refused on one hot key do not move
    /// its lines between their cores. `None` if the copy could not be made
    /// (the key is not stored, a writer got in the way, the map is never
    /// read so: [`Probe::reads_lock_free`]) or the request
    /// would be admitted: those take the locked path. Kept out of line: inlined next to the locked path's decision,
    /// it slowed every check by a third.
    #[inline(never)]
    fn denial<Q, C>(
        &self,
        probe: &Probe<'_, K, R::State>,
        key: &Q,
        cost: u64,
        clock: &C,
    ) -> Option<Decision>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
        C: Clock,
    {
        let state = probe.peek(key)?;
        // As if the request had come when the copy was made and the clock
        // been read a moment later: a denial changes nothing to order.
        let decision = self.judge(&state, self.settle(&state, clock.now(), clock), cost);
        (!decision.allowed || cost == 0).then_some(decision)
    }

    /// `now`, or the key's own time when that is ahead by no more than
    /// the clock's [`Clock::reorder_window`]: a reading that the CPU took
    /// a moment before the lock was acquired, not a reservation.
    #[inline(always)]
    fn settle<C: Clock>(&self, state: &R::State, now: u64, clock: &C) -> u64 {
        let last = self.rules.last_update(state);
        if last > now && last - now <= clock.reorder_window() {
            last
        } else {
            now
        }
    }

    /// Like the core's `decide`, except while a reservation holds the key
    /// (its clock is ahead of now): nothing may go before the reservation,
    /// so a charge is refused until then.
    #[inline(always)]
    fn decide_held(&self, state: &mut R::State, now: u64, cost: u64) -> Decision {
        let held = self.rules.last_update(state);
        if held <= now || cost == 0 {
            return self.rules.decide(state, now, cost);
        }
        self.refused_while_held(state, now, held, cost)
    }

    /// What [`Keyed::decide_held`] would say, charging nothing.
    #[inline(always)]
    fn judge(&self, state: &R::State, now: u64, cost: u64) -> Decision {
        let held = self.rules.last_update(state);
        if held <= now || cost == 0 {
            return self.rules.preview(state, now, cost);
        }
        self.refused_while_held(state, now, held, cost)
    }

    /// The denial of a charge at `now`, before the reservation holding the
    /// key until `held`: the core's numbers at `held`, plus the hold.
    fn refused_while_held(&self, state: &R::State, now: u64, held: u64, cost: u64) -> Decision {
        let hold = held - now;
        let then = self.rules.preview(state, held, cost);
        Decision {
            allowed: false,
            remaining: 0,
            retry_after: match then.retry_after {
                RetryAfter::Now => RetryAfter::After(hold),
                RetryAfter::After(wait) => RetryAfter::After(hold.saturating_add(wait)),
                RetryAfter::Never => RetryAfter::Never,
            },
            reset_after: then.reset_after.saturating_add(hold),
            delay: 0,
            ..then
        }
    }

    /// The decision a new key gets when the table is full and the policy
    /// is to reject: a denial, with the policy's own numbers for a fresh key.
    pub(crate) fn full_decision(&self, cost: u64, retry_after: u64) -> Decision {
        Decision {
            allowed: false,
            remaining: 0,
            retry_after: RetryAfter::After(retry_after),
            ..self.rules.preview(&self.rules.fresh(), 0, cost)
        }
    }

    /// Stores a charged new key if there is room (made by evicting idle keys
    /// of its shard when the table is full). False if there is none.
    fn track<Q>(
        &self,
        located: &mut Located<'_, K, R::State>,
        key: &Q,
        state: R::State,
        now: u64,
        bounds: &Bounds,
    ) -> bool
    where
        Q: ToOwned<Owned = K> + ?Sized,
    {
        if !self.make_room(located, now, bounds) {
            return false;
        }
        self.add(located, key.to_owned(), state, now, bounds);
        true
    }

    /// Counts a new key in, evicting idle keys of its shard if the table is
    /// full. False if there is no room.
    fn make_room(&self, located: &mut Located<'_, K, R::State>, now: u64, bounds: &Bounds) -> bool {
        if count_in(&bounds.keys, bounds.max_keys) {
            return true;
        }
        self.sweep_locked(located, EVICT_SCAN, usize::MAX, now, bounds) > 0
            && count_in(&bounds.keys, bounds.max_keys)
    }

    /// Stores a new key (already counted in). If its shard's table is full,
    /// idle keys are swept first (see [`GROWTH_SWEEP`]) and the table grows
    /// only if there were none. While the table has room nothing is swept:
    /// a key idle between requests (a generous quota) is not dropped and
    /// created again each time while memory is not short.
    fn add(
        &self,
        located: &mut Located<'_, K, R::State>,
        key: K,
        state: R::State,
        now: u64,
        bounds: &Bounds,
    ) {
        let table = &located.shard.table;
        if table.len() >= table.capacity() {
            let budget = table.buckets() / GROWTH_SWEEP;
            let enough = (table.capacity() / GROWTH_FREED).max(1);
            let idle_since = now.saturating_sub(bounds.idle_grace);
            self.sweep_locked(located, budget, enough, idle_since, bounds);
        }
        self.map.insert(located, key, state);
    }

    /// Sweeps `budget` buckets of the located shard, dropping the keys that
    /// were already idle at `idle_since` (stopping once it dropped
    /// `max_removed`). A key is idle from some time on
    /// until its next charge, and the core judges a time before a key's
    /// last change as that change's time, so a key idle at `idle_since` has
    /// been idle since then at least.
    fn sweep_locked(
        &self,
        located: &mut Located<'_, K, R::State>,
        budget: usize,
        max_removed: usize,
        idle_since: u64,
        bounds: &Bounds,
    ) -> usize {
        let removed = located.shard.sweep(budget, max_removed, |state| {
            self.rules.is_idle(state, idle_since)
        });
        bounds.keys.fetch_sub(removed, Ordering::Relaxed);
        removed
    }

    /// Sweeps up to `budget` buckets of shard `index` (modulo the shard
    /// count). Returns the keys removed and the shard's bucket count.
    pub(crate) fn sweep_shard<C: Clock>(
        &self,
        index: usize,
        budget: usize,
        clock: &C,
        bounds: &Bounds,
    ) -> (usize, usize) {
        let mut shard = self.map.lock_shard(index);
        let idle_since = clock.now().saturating_sub(bounds.idle_grace);
        let removed = shard.sweep(budget, usize::MAX, |state| {
            self.rules.is_idle(state, idle_since)
        });
        bounds.keys.fetch_sub(removed, Ordering::Relaxed);
        (removed, shard.buckets())
    }

    pub(crate) fn shard_count(&self) -> usize {
        self.map.shard_count()
    }

    /// Forgets `key`. True if it was tracked.
    pub(crate) fn reset<Q>(&self, key: &Q, bounds: &Bounds) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut located = self.map.locate(key);
        let removed = located.remove(key).is_some();
        if removed {
            bounds.keys.fetch_sub(1, Ordering::Relaxed);
        }
        removed
    }

    /// Gives `cost` back to `key` (nothing to do for an untracked key: it
    /// is already as fresh as can be) and returns its numbers after it.
    pub(crate) fn refund<Q, C>(&self, key: &Q, cost: u64, clock: &C) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        C: Clock,
    {
        let mut located = self.map.locate(key);
        let now = clock.now();
        match located.get_mut(key) {
            Some(state) => {
                self.rules.refund(state, now, cost);
                self.rules.preview(state, now, 0)
            }
            None => self.rules.preview(&self.rules.fresh(), now, 0),
        }
    }

    /// Charges `cost` at the earliest time it fits (now, or now plus the
    /// wait the core reports), provided the request may go within `max_wait`
    /// nanoseconds. The key's clock moves to that time: until then the
    /// reservation holds it (see `decide_held`).
    pub(crate) fn reserve<Q, C>(
        &self,
        key: &Q,
        cost: u64,
        max_wait: u64,
        clock: &C,
        bounds: &Bounds,
    ) -> Result<Reserved, WaitError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        C: Clock,
    {
        let mut located = self.map.locate(key);
        let now = clock.now();
        if let Some(state) = located.get_mut(key) {
            return self.reserve_in(state, now, cost, max_wait);
        }
        let mut state = self.rules.fresh();
        let reserved = self.reserve_in(&mut state, now, cost, max_wait)?;
        if cost == 0 || self.track(&mut located, key, state, now, bounds) {
            return Ok(reserved);
        }
        match bounds.on_full {
            OnFull::Shared => self.reserve_in(&mut self.overflow.lock(), now, cost, max_wait),
            OnFull::AdmitUntracked | OnFull::Reject => Err(WaitError::Full(LimiterFull {
                max_keys: bounds.max_keys,
            })),
        }
    }

    fn reserve_in(
        &self,
        state: &mut R::State,
        now: u64,
        cost: u64,
        max_wait: u64,
    ) -> Result<Reserved, WaitError> {
        let mut at = now.max(self.rules.last_update(state));
        // Admission only gets easier as a key is left alone, and the core's
        // wait is exact, so the first wait is the answer; the loop guards
        // the several-limit case all the same.
        let mut preview = self.rules.preview(state, at, cost);
        for _ in 0..4 {
            match preview.retry_after {
                RetryAfter::Now => break,
                RetryAfter::After(wait) => {
                    at = at.saturating_add(wait);
                    preview = self.rules.preview(state, at, cost);
                }
                RetryAfter::Never => return Err(WaitError::NeverFits(preview)),
            }
        }
        if !preview.allowed {
            return Err(WaitError::NeverFits(preview));
        }
        let ready_at = at.saturating_add(preview.delay);
        let wait = ready_at - now;
        if wait > max_wait {
            return Err(WaitError::TooLate { wait });
        }
        let decision = self.rules.decide(state, at, cost);
        Ok(Reserved { decision, ready_at })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use tollgate_core::algorithms::{Gcra, LeakyQueue};
    use tollgate_core::{AlgorithmState, Compact, Quota};

    use super::*;
    use crate::rules::One;
    use crate::{CompactKey, FakeClock, OnFull};

    fn bounds() -> Bounds {
        Bounds {
            max_keys: usize::MAX,
            on_full: OnFull::default(),
            full_retry: 0,
            idle_grace: 0,
            keys: AtomicUsize::new(0),
        }
    }

    #[test]
    fn refusals_read_without_the_lock_once_threads_take_turns_and_locked_again_alone() {
        let quota = Quota::per_hour(1).unwrap();
        let keyed: Keyed<u64, One<Compact<Gcra>>> = Keyed::new(One::new(quota), Sizing::growing(2));
        let (clock, bounds) = (FakeClock::new(), bounds());
        let peek_first = || keyed.map.probe(&7).peek_first();
        assert!(keyed.check(&7, 1, &clock, &bounds).unwrap().allowed);
        // Alone on the key: every refusal takes the lock.
        assert!(!keyed.check(&7, 1, &clock, &bounds).unwrap().allowed);
        assert!(!peek_first());
        // Another thread refused on it: the shard changed hands, with no
        // wait needed to see it.
        std::thread::scope(|s| {
            s.spawn(|| assert!(!keyed.check(&7, 1, &clock, &bounds).unwrap().allowed));
        });
        assert!(peek_first());
        // Alone again: after `LOCKED_EVERY` reads one takes the lock and
        // finds the shard changed hands once more; after as many again,
        // that this thread held it last.
        for _ in 0..2 * (crate::readers::LOCKED_EVERY + 1) {
            assert!(!keyed.check(&7, 1, &clock, &bounds).unwrap().allowed);
        }
        assert!(!peek_first());
    }

    /// Checks a trace of (key, gap, cost) on two limiters, one trying
    /// denials without the lock first (as under contention) and one always
    /// locked: both must decide as the core does, and every denial or peek
    /// of a stored key must come from the lock-free path, equal to the
    /// locked one (for key types never read so, the lock-free path must
    /// give nothing).
    fn lock_free_denials_are_the_locked_ones<K, S>(
        quota: Quota,
        trace: &[(u8, u64, u64)],
        name: impl Fn(u8) -> K,
    ) where
        K: Hash + Eq + Clone + Send + Sync,
        S: AlgorithmState + Clone + Send + Sync,
    {
        let lock_free: Keyed<K, One<S>> = Keyed::new(One::new(quota), Sizing::growing(2));
        let locked: Keyed<K, One<S>> = Keyed::new(One::new(quota), Sizing::growing(2));
        let clock = FakeClock::new();
        let bounds = bounds();
        let mut model = [(); 4].map(|_| S::new(&quota));
        let mut stored = [false; 4];
        for &(index, gap, cost) in trace {
            let key = name(index);
            lock_free.map.peek_first_everywhere();
            clock.advance(std::time::Duration::from_nanos(gap));
            let expected = model[usize::from(index)].decide(&quota, clock.now(), cost);
            // One read in 64 on a thread is sent to the lock on purpose.
            let probe = lock_free.map.probe(&key);
            let read = lock_free
                .denial(&probe, &key, cost, &clock)
                .or_else(|| lock_free.denial(&probe, &key, cost, &clock));
            if probe.reads_lock_free()
                && stored[usize::from(index)]
                && (!expected.allowed || cost == 0)
            {
                assert_eq!(read, Some(expected));
            } else {
                assert_eq!(read, None);
            }
            assert_eq!(locked.check(&key, cost, &clock, &bounds), Ok(expected));
            assert_eq!(lock_free.check(&key, cost, &clock, &bounds), Ok(expected));
            stored[usize::from(index)] |= expected.allowed && cost > 0;
        }
    }

    #[test]
    fn a_full_table_drops_idle_keys_instead_of_growing() {
        let quota = Quota::with_parts(10, 1_000, 10).unwrap();
        let keyed: Keyed<u64, One<Compact<Gcra>>> = Keyed::new(One::new(quota), Sizing::growing(1));
        let clock = FakeClock::new();
        let bounds = bounds();
        let mut key = 0;
        // Large enough that an eighth of the table is far more than its
        // tail (mostly empty buckets after the last home bucket).
        let charge_until_full = |key: &mut u64| {
            for _ in 0..8_000 {
                assert!(keyed.check(key, 1, &clock, &bounds).unwrap().allowed);
                *key += 1;
            }
            let capacity = keyed.map.lock_shard(0).table.capacity();
            while keyed.map.lock_shard(0).table.len() < capacity {
                assert!(keyed.check(key, 1, &clock, &bounds).unwrap().allowed);
                *key += 1;
            }
            keyed.map.lock_shard(0).buckets()
        };
        let buckets = charge_until_full(&mut key);
        // Every key is idle a second later: new keys take their room.
        clock.advance(std::time::Duration::from_secs(1));
        for _ in 0..100 {
            assert!(keyed.check(&key, 1, &clock, &bounds).unwrap().allowed);
            key += 1;
        }
        assert_eq!(keyed.map.lock_shard(0).buckets(), buckets);
        // With no idle key, a full table grows.
        charge_until_full(&mut key);
        assert!(keyed.check(&key, 1, &clock, &bounds).unwrap().allowed);
        assert!(keyed.map.lock_shard(0).buckets() > buckets);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn denials_read_without_the_lock_are_the_locked_ones(
            limit in 1u64..5,
            period in 1u64..1_000,
            burst in 1u64..5,
            trace in prop::collection::vec((0u8..4, 0u64..400, 0u64..4), 1..100),
        ) {
            let quota = Quota::with_parts(limit, period, burst).unwrap();
            lock_free_denials_are_the_locked_ones::<_, Compact<Gcra>>(quota, &trace, |k| k);
            lock_free_denials_are_the_locked_ones::<_, Compact<LeakyQueue>>(quota, &trace, |k| k);
            // Keys that own no memory but are compared by their bytes: a
            // fixed-size name, and strings borrowed for the map's life.
            lock_free_denials_are_the_locked_ones::<_, Compact<Gcra>>(quota, &trace, |k| {
                let mut name = *b"user-0__________";
                name[5] += k;
                name
            });
            lock_free_denials_are_the_locked_ones::<_, Compact<Gcra>>(quota, &trace, |k| {
                ["user-0", "user-1", "user-2", "user-3"][usize::from(k)]
            });
            // Keys that own memory, of the types compared in place: the
            // strings' own bytes, and a `CompactKey` inline or boxed.
            lock_free_denials_are_the_locked_ones::<_, Compact<Gcra>>(quota, &trace, |k| format!("user-{k}"));
            lock_free_denials_are_the_locked_ones::<_, Compact<Gcra>>(quota, &trace, |k| {
                CompactKey::new(&format!("{}-{k}", "k".repeat(usize::from(k) * 8)))
            });
            // A key type of the user's own that owns memory: always the
            // locked path.
            lock_free_denials_are_the_locked_ones::<_, Compact<Gcra>>(quota, &trace, |k| Named(format!("user-{k}")));
        }
    }

    /// A key type of the user's own, owning memory: its `Eq` could do
    /// anything on a bit copy, so it is never read without the lock.
    #[derive(Clone, Hash, PartialEq, Eq)]
    struct Named(String);

    /// Whether a map of `key`'s type reads refusals without the lock.
    fn reads_lock_free<K: Hash + Eq>(key: K) -> bool {
        let map: ShardedMap<K, Compact<Gcra>> = ShardedMap::new(Sizing::growing(1));
        map.probe(&key).reads_lock_free()
    }

    #[test]
    fn keys_that_own_no_memory_or_are_known_strings_are_read_without_the_lock() {
        assert!(reads_lock_free(7u64));
        assert!(reads_lock_free([0u8; 16]));
        assert!(reads_lock_free("user-7"));
        // Owning memory: the types `crate::owned_keys` lists, only.
        assert!(reads_lock_free(String::from("user-7")));
        assert!(reads_lock_free(CompactKey::new("user-7")));
        assert!(!reads_lock_free(Named("user-7".into())));
        // A state that owns memory: never, whatever the key.
        let map: ShardedMap<u64, String> = ShardedMap::new(Sizing::growing(1));
        assert!(!map.probe(&7).reads_lock_free());
    }

    #[test]
    fn hot_keys_refused_from_many_threads_while_tables_grow_and_keys_go() {
        hot_keys_refused_while_tables_grow_and_keys_go(|n| n);
        // Keys that own memory: a removed key's bytes are freed while the
        // other threads compare keys without the lock.
        hot_keys_refused_while_tables_grow_and_keys_go(|n| format!("user-{n}"));
        // Longer than a `CompactKey` holds inline: each its own allocation.
        hot_keys_refused_while_tables_grow_and_keys_go(|n| {
            CompactKey::new(&format!("a key longer than inline: {n}"))
        });
    }

    /// Threads refusing hot keys without the lock while another thread
    /// churns their shards; `name` gives the `n`th key.
    fn hot_keys_refused_while_tables_grow_and_keys_go<K>(name: impl Fn(u64) -> K + Sync)
    where
        K: Hash + Eq + Clone + Send + Sync,
    {
        // The crash of session 9, on purpose: threads refused on hot keys
        // (so their shards read denials without the lock) while another
        // thread makes the same shards' tables grow, over and over (new
        // keys, several growths per insert now and then) and takes keys
        // out again (moving the others back). The clock stands still, so
        // every refusal of a hot key must be exactly the first one: a read
        // of a stale table or a torn entry would show as another decision,
        // or as a crash.
        let quota = Quota::with_parts(1, 3_600_000_000_000, 1).unwrap();
        let clock = FakeClock::new();
        let bounds = bounds();
        let lock_free = AtomicUsize::new(0);
        for round in 0..8u64 {
            // Few shards: the churn lands in the hot keys' shards.
            let keyed: Keyed<K, One<Compact<Gcra>>> =
                Keyed::new(One::new(quota), Sizing::growing(2));
            let hot: Vec<K> = (0..4).map(|k| name(round << 32 | k)).collect();
            let refusals: Vec<Decision> = hot
                .iter()
                .map(|key| {
                    assert!(keyed.check(key, 1, &clock, &bounds).unwrap().allowed);
                    let refusal = keyed.check(key, 1, &clock, &bounds).unwrap();
                    assert!(!refusal.allowed);
                    refusal
                })
                .collect();
            let done = std::sync::atomic::AtomicBool::new(false);
            // The churn starts once every refusing thread runs.
            let start = std::sync::Barrier::new(4);
            std::thread::scope(|s| {
                for thread in 0..3 {
                    let (keyed, hot, refusals) = (&keyed, &hot, &refusals);
                    let (clock, bounds, done, lock_free) = (&clock, &bounds, &done, &lock_free);
                    let start = &start;
                    s.spawn(move || {
                        let mut n = thread;
                        let mut read = 0;
                        start.wait();
                        // At least a few thousand, however soon the churn
                        // is over.
                        while n < 2_000 || !done.load(Ordering::Relaxed) {
                            n += 1;
                            let i = n % hot.len();
                            let probe = keyed.map.probe(&hot[i]);
                            if let Some(decision) = keyed.denial(&probe, &hot[i], 1, clock) {
                                assert_eq!(decision, refusals[i]);
                                read += 1;
                            }
                            let decision = keyed.check(&hot[i], 1, clock, bounds).unwrap();
                            assert_eq!(decision, refusals[i]);
                            keyed.map.peek_first_everywhere();
                        }
                        lock_free.fetch_add(read, Ordering::Relaxed);
                    });
                }
                // Stops the refusing threads even if an assertion below
                // fails.
                struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
                impl Drop for Stop<'_> {
                    fn drop(&mut self) {
                        self.0.store(true, Ordering::Relaxed);
                    }
                }
                let _stop = Stop(&done);
                start.wait();
                for n in 1_000..30_000u64 {
                    let key = name(n);
                    assert!(keyed.check(&key, 1, &clock, &bounds).unwrap().allowed);
                    // A read right after each insert, which may have grown
                    // the table (twice, now and then): refused, as charged.
                    let probe = keyed.map.probe(&key);
                    if let Some(decision) = keyed.denial(&probe, &key, 1, &clock) {
                        assert_eq!(decision, refusals[0]);
                    }
                    // Takes two new keys in three out again.
                    if n % 3 != 0 {
                        assert!(keyed.reset(&key, &bounds));
                    }
                    if n % 1_000 == 0 {
                        keyed.sweep_shard(n as usize / 1_000, 64, &clock, &bounds);
                    }
                }
            });
        }
        // The refusals did take the lock-free path (not in every round
        // necessarily: that depends on the scheduling).
        assert!(lock_free.load(Ordering::Relaxed) > 0);
    }
}
