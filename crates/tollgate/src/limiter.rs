//! [`Limiter`]: the keyed, in-process rate limiter.

use std::borrow::Borrow;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tollgate_core::algorithms::{
    FixedWindow, Gcra, LeakyBucket, LeakyQueue, SlidingCounter, SlidingLog, TokenBucket,
};
#[cfg(feature = "async")]
use tollgate_core::RetryAfter;
use tollgate_core::{Algorithm, Compact, Decision, Lease, LeaseError};

use crate::keyed::{Bounds, Keyed};
use crate::rules::{All, One};
use crate::sharded::{default_shards, Sizing};
#[cfg(feature = "async")]
use crate::AsyncClock;
use crate::{Clock, Limit, MonotonicClock, Policy, Quota, QuotaError};

/// A rate limiter holding the state of many keys in process memory.
///
/// Every decision is made by the exact core ([`tollgate_core`]), so a
/// `Limiter` answers exactly like `tollgate replay` on the same request times.
/// Keys live in a sharded hash map (32 shards per CPU up to 1,024, each behind its own
/// lock); a charge reads the clock after locking the key's shard, so each
/// key sees its times in order. When threads queue for a shard while being
/// refused (a hot key under attack), its denials are decided from a copy of
/// the key's state read without the lock (a sequence lock: the copy is
/// used only if no charge came meanwhile), which writes nothing the other
/// threads read, until a charge is admitted again. That holds for keys
/// that own no memory (`u64`, `[u8; N]`, `&'static str`) and for `String`,
/// `Box<str>`, `Arc<str>`, `Vec<u8>`, `Box<[u8]>`, `Arc<[u8]>` and
/// [`CompactKey`](crate::CompactKey); other key types that own memory
/// always take the lock, since nothing can tell what their `Eq` does on a
/// copy of a key another thread may be freeing. `Limiter` is `Send + Sync` and has no global
/// state: share it with an `Arc`.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, FakeClock, Limit, Limiter, Quota, RetryAfter};
///
/// // 100 requests per minute per user, at most 10 at once.
/// let quota = Quota::per_minute(100).unwrap().with_burst(10).unwrap();
/// let clock = FakeClock::new();
/// let limiter = Limiter::builder(Limit::new(Algorithm::Gcra, quota))
///     .clock(clock.clone())
///     .build();
///
/// for _ in 0..10 {
///     assert!(limiter.check("alice").allowed);
/// }
/// let denied = limiter.check("alice");
/// assert!(!denied.allowed);
/// assert_eq!(denied.retry_after, RetryAfter::After(600_000_000)); // 60 s / 100
/// assert!(limiter.check("bob").allowed); // every key has its own budget
///
/// clock.advance(Duration::from_millis(600));
/// assert!(limiter.check_cost("alice", 1).allowed); // any cost: check_cost
/// ```
///
/// # Memory
///
/// A key is stored only once it is charged (peeks and denials of unknown
/// keys store nothing) and is forgotten by the sweep once it has been back
/// to its initial state for [`LimiterBuilder::idle_grace`]: a forgotten key
/// decides exactly like a kept one. Sweeping is incremental and never stops
/// the world: before a shard's table grows, up to an eighth of it is swept
/// (the table grows only if no key there was idle), and
/// [`Limiter::sweep_step`] / [`Limiter::sweep`] lock one shard at a time. [`LimiterBuilder::max_keys`] caps the keys against a
/// flood of random ones: a new key beyond it evicts an idle key near it,
/// and if there is none, [`OnFull`] says how it is decided: by default
/// against one overflow budget shared by all the keys left out.
///
/// A key of the bucket family (GCRA, token bucket, leaky bucket and queue)
/// is stored in 16 bytes whenever its quota allows (see
/// [`Compact`]): with a `u64` key, about 30.5 bytes
/// per key at 1M keys when the tables grow on demand (they grow by an
/// eighth at a time, so they stay 78–88% full), 29.2 with
/// [`LimiterBuilder::capacity`] (see `docs/PERFORMANCE.md`).
///
/// The same code against a shared store (Redis, ...) goes through
/// [`Store`](crate::Store), which takes any [`Backend`](crate::Backend); the
/// in-process one is [`MemoryBackend`](crate::MemoryBackend), so switching
/// stores is one line.
pub struct Limiter<K, C = MonotonicClock> {
    policy: Policy,
    table: Table<K>,
    clock: C,
    bounds: Bounds,
    /// Which shard [`Limiter::sweep_step`] visits next.
    sweep_next: AtomicUsize,
}

/// The keys of the policy, stored as the algorithm's own state type when
/// the policy has one limit, a bucket-family key in its 16-byte compact
/// form (see `tollgate_core::Compact`). A bucket quota too wide for it
/// (`(burst + 1) × period` beyond 2^63 ticks) and a policy of several
/// limits store the core's `State` per limit instead.
enum Table<K> {
    FixedWindow(Keyed<K, One<FixedWindow>>),
    SlidingLog(Keyed<K, One<SlidingLog>>),
    SlidingCounter(Keyed<K, One<SlidingCounter>>),
    TokenBucket(Keyed<K, One<Compact<TokenBucket>>>),
    Gcra(Keyed<K, One<Compact<Gcra>>>),
    LeakyBucket(Keyed<K, One<Compact<LeakyBucket>>>),
    LeakyQueue(Keyed<K, One<Compact<LeakyQueue>>>),
    All(Keyed<K, All>),
}

/// Runs `$body` with `$keyed` bound to the table's `Keyed`.
macro_rules! with_keyed {
    ($table:expr, $keyed:ident => $body:expr) => {
        match $table {
            Table::FixedWindow($keyed) => $body,
            Table::SlidingLog($keyed) => $body,
            Table::SlidingCounter($keyed) => $body,
            Table::TokenBucket($keyed) => $body,
            Table::Gcra($keyed) => $body,
            Table::LeakyBucket($keyed) => $body,
            Table::LeakyQueue($keyed) => $body,
            Table::All($keyed) => $body,
        }
    };
}

impl<K: Hash + Eq> Table<K> {
    fn new(policy: &Policy, sizing: Sizing) -> Self {
        let limits = policy.limits();
        let several = || Table::All(Keyed::new(All::new(limits), sizing));
        let [limit] = limits else {
            return several();
        };
        let quota = limit.quota;
        macro_rules! keyed {
            () => {
                Keyed::new(One::new(quota), sizing)
            };
        }
        // Every bucket algorithm's compact form fits the same quotas.
        let compact = Compact::<Gcra>::fits(&quota);
        match (limit.algorithm, compact) {
            (Algorithm::FixedWindow, _) => Table::FixedWindow(keyed!()),
            (Algorithm::SlidingLog, _) => Table::SlidingLog(keyed!()),
            (Algorithm::SlidingCounter, _) => Table::SlidingCounter(keyed!()),
            (Algorithm::TokenBucket, true) => Table::TokenBucket(keyed!()),
            (Algorithm::Gcra, true) => Table::Gcra(keyed!()),
            (Algorithm::LeakyBucket, true) => Table::LeakyBucket(keyed!()),
            (Algorithm::LeakyQueue, true) => Table::LeakyQueue(keyed!()),
            (_, false) => several(),
        }
    }
}

/// What a limiter does with a new key when it already holds `max_keys` keys
/// and none of the keys it looked at could be evicted as idle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnFull {
    /// Decide the request against one overflow budget shared by every key
    /// that could not be tracked: the policy applied to all of them as if
    /// they were one key. Known keys stay limited as before, and a flood of
    /// random new keys cannot get more through together than one key's
    /// quota, so a brand-new key during the flood may be refused for the
    /// flood's spending. The default: safe under attack, never unlimited.
    #[default]
    Shared,
    /// Decide the request as a new key's first one, without remembering it:
    /// known keys stay limited, new keys are **not limited** until room
    /// frees. Only for key sets known to be bounded.
    AdmitUntracked,
    /// Refuse the request: [`Limiter::try_check`] returns [`LimiterFull`] and
    /// [`Limiter::check`] a denial.
    Reject,
}

/// A new key was refused because the limiter holds its maximum of keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the limiter holds its maximum of {max_keys} keys and found none idle to evict")]
pub struct LimiterFull {
    /// The limiter's `max_keys`.
    pub max_keys: usize,
}

/// Why [`Limiter::reserve`] or [`Limiter::until_ready`] gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WaitError {
    /// The cost can never fit the policy; the decision says why.
    #[error("a cost this large can never be admitted")]
    NeverFits(Decision),
    /// The request could go only after `wait` ns, beyond the caller's limit.
    #[error("the request could only go in {wait} ns, after the deadline")]
    TooLate {
        /// Nanoseconds until the request could go.
        wait: u64,
    },
    /// A new key could not be tracked.
    #[error(transparent)]
    Full(#[from] LimiterFull),
}

/// Options of a [`Limiter`] of keys `K`, from [`Limiter::builder`].
pub struct LimiterBuilder<K, C = MonotonicClock> {
    keys: PhantomData<fn() -> K>,
    policy: Policy,
    clock: C,
    max_keys: usize,
    on_full: OnFull,
    full_retry: Duration,
    idle_grace: Duration,
    shards: usize,
    capacity: usize,
}

impl<K: Hash + Eq, C: Clock> LimiterBuilder<K, C> {
    /// Uses `clock` instead of the default [`MonotonicClock`].
    pub fn clock<C2: Clock>(self, clock: C2) -> LimiterBuilder<K, C2> {
        LimiterBuilder {
            keys: PhantomData,
            policy: self.policy,
            clock,
            max_keys: self.max_keys,
            on_full: self.on_full,
            full_retry: self.full_retry,
            idle_grace: self.idle_grace,
            shards: self.shards,
            capacity: self.capacity,
        }
    }

    /// Holds at most `max_keys` keys. A new key beyond it first evicts an
    /// idle key from the ones near it in its shard (up to 64 looked at);
    /// if none is idle, [`LimiterBuilder::on_full`] decides (by default
    /// [`OnFull::Shared`]: one budget for all the keys left out).
    /// Unbounded by default.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// What a new key gets when the limiter holds `max_keys` keys and none
    /// is idle (default: [`OnFull::Shared`]).
    pub fn on_full(mut self, on_full: OnFull) -> Self {
        self.on_full = on_full;
        self
    }

    /// The `retry_after` that [`Limiter::check`] reports to a new key
    /// refused under [`OnFull::Reject`] (default: 1 s).
    pub fn full_retry_after(mut self, retry_after: Duration) -> Self {
        self.full_retry = retry_after;
        self
    }

    /// How long a key must have been idle (back to its initial state)
    /// before a sweep forgets it; default 10 s. A key forgotten and seen
    /// again costs an insertion instead of an update, so the grace keeps
    /// keys of generous quotas, idle again a microsecond after each request,
    /// from being dropped and created over and over. The price is memory:
    /// a table holds, besides its busy keys, every key charged in the last
    /// grace (a flood of one-off keys at R a second keeps about R × grace
    /// of them; `max_keys` still caps the total). The default was 1 s until
    /// clients cycling through a million keys in a little over a second
    /// were measured being dropped just before each return, paying a
    /// removal and an insertion per request (4.5× the instructions of an
    /// update); nginx's `limit_req` keeps idle keys 60 s. Eviction for room
    /// under `max_keys` ignores the grace and takes any idle key.
    pub fn idle_grace(mut self, grace: Duration) -> Self {
        self.idle_grace = grace;
        self
    }

    /// Splits the keys into `shards` independently locked parts (1 to
    /// 65,536). Default: 32 per CPU, at most 1,024.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }

    /// Allocates room for `keys` keys up front, the tables nearly 7/8 full
    /// at that many keys: filling them rehashes nothing (grown on demand, a
    /// table is rebuilt each time it grows by an eighth), and a GCRA key
    /// takes about 29.2 bytes at 1M `u64` keys against 30.5 grown on demand.
    /// Tables still grow past it. Default: 0, grown on demand.
    pub fn capacity(mut self, keys: usize) -> Self {
        self.capacity = keys;
        self
    }

    fn sizing(&self) -> Sizing {
        if self.capacity == 0 {
            Sizing::growing(self.shards)
        } else {
            Sizing::for_keys(self.capacity, self.shards)
        }
    }

    /// The limiter.
    pub fn build(self) -> Limiter<K, C> {
        Limiter {
            table: Table::new(&self.policy, self.sizing()),
            policy: self.policy,
            clock: self.clock,
            bounds: Bounds {
                max_keys: self.max_keys,
                on_full: self.on_full,
                full_retry: nanos(self.full_retry),
                idle_grace: nanos(self.idle_grace),
                keys: AtomicUsize::new(0),
            },
            sweep_next: AtomicUsize::new(0),
        }
    }
}

impl<K: Hash + Eq> Limiter<K> {
    /// A limiter for `policy` (a [`Limit`] or a [`Policy`] of
    /// several) on the default monotonic clock, with no bound on keys.
    pub fn new(policy: impl Into<Policy>) -> Self {
        Limiter::builder(policy).build()
    }

    /// `limit` requests per second per key, at most `limit` at once: GCRA
    /// (smooth, no window edges) on the default clock. Refused for a limit
    /// of 0 or above [`Quota::MAX_LIMIT`](crate::Quota::MAX_LIMIT).
    pub fn per_second(limit: u64) -> Result<Self, QuotaError> {
        Ok(Limiter::new(Limit::new(
            Algorithm::Gcra,
            Quota::per_second(limit)?,
        )))
    }

    /// `limit` requests per minute per key, at most `limit` at once; see
    /// [`Limiter::per_second`].
    ///
    /// ```
    /// let limiter = tollgate::Limiter::per_minute(100)?;
    /// assert!(limiter.check("user-42").allowed);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn per_minute(limit: u64) -> Result<Self, QuotaError> {
        Ok(Limiter::new(Limit::new(
            Algorithm::Gcra,
            Quota::per_minute(limit)?,
        )))
    }

    /// `limit` requests per hour per key, at most `limit` at once; see
    /// [`Limiter::per_second`].
    pub fn per_hour(limit: u64) -> Result<Self, QuotaError> {
        Ok(Limiter::new(Limit::new(
            Algorithm::Gcra,
            Quota::per_hour(limit)?,
        )))
    }

    /// Options: clock, `max_keys`, shards, capacity. The key type is
    /// usually inferred from the limiter's use.
    pub fn builder(policy: impl Into<Policy>) -> LimiterBuilder<K> {
        LimiterBuilder {
            keys: PhantomData,
            policy: policy.into(),
            clock: MonotonicClock::new(),
            max_keys: usize::MAX,
            on_full: OnFull::default(),
            full_retry: Duration::from_secs(1),
            idle_grace: Duration::from_secs(10),
            shards: default_shards(),
            capacity: 0,
        }
    }
}

impl<K: Hash + Eq, C: Clock> Limiter<K, C> {
    /// Decides a request for `key` now (cost 1) and charges it if admitted.
    /// Under [`OnFull::Reject`], a new key that cannot be tracked gets a
    /// denial with the builder's `full_retry_after`; use
    /// [`Limiter::try_check`] to tell that case apart.
    // `check`, `check_cost` and `try_check_cost` always inline into the
    // caller: with `&str` keys the compiler otherwise kept the lookup out of
    // line and returned the decision through memory (measured 4-6% slower
    // per check than inlined, as `u64` keys already were).
    #[inline(always)]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_cost(key, 1)
    }

    /// Decides a request of `cost` for `key` now, and charges it if admitted
    /// (on every limit of the policy, or on none). Cost 0 is a peek.
    #[inline(always)]
    pub fn check_cost<Q>(&self, key: &Q, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.try_check_cost(key, cost).unwrap_or_else(
            |_| with_keyed!(&self.table, t => t.full_decision(cost, self.bounds.full_retry)),
        )
    }

    /// Like [`Limiter::check`], but a new key refused because the limiter is
    /// full (under [`OnFull::Reject`]) is an error.
    #[inline]
    pub fn try_check<Q>(&self, key: &Q) -> Result<Decision, LimiterFull>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.try_check_cost(key, 1)
    }

    /// Like [`Limiter::check_cost`], but a new key refused because the
    /// limiter is full (under [`OnFull::Reject`]) is an error.
    #[inline(always)]
    pub fn try_check_cost<Q>(&self, key: &Q, cost: u64) -> Result<Decision, LimiterFull>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        with_keyed!(&self.table, t => t.check(key, cost, &self.clock, &self.bounds))
    }

    /// The key's current numbers (a check of cost 0): changes nothing.
    pub fn peek<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_cost(key, 0)
    }

    /// Forgets `key`, as if it had never been seen. True if it was tracked.
    pub fn reset<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        with_keyed!(&self.table, t => t.reset(key, &self.bounds))
    }

    /// Gives `cost` back to `key`, for a request that was admitted but not
    /// carried out: the inverse of a charge of `cost` now, on every limit.
    /// Capped: a key never gets more room than a fresh key has. Which charges
    /// are undone, per algorithm: the newest ones still counted (windows and
    /// the log), `cost` emission intervals of debt (the bucket family), or of
    /// queue (the leaky queue). Returns the key's numbers after it.
    pub fn refund<Q>(&self, key: &Q, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        with_keyed!(&self.table, t => t.refund(key, cost, &self.clock))
    }

    /// Charges `cost` for `key` now whatever its state, on every limit, and
    /// returns its numbers after the charge: for a cost known only once the
    /// work is done (tokens of a reply). Never denies; the key may go into
    /// debt and is then denied, with an exact `retry_after`, until the debt
    /// is repaid (see [`State::force`](crate::State::force)). Under
    /// [`OnFull::Reject`], a new key that cannot be tracked is not charged
    /// and gets the denial [`Limiter::check`] would give it.
    pub fn force<Q>(&self, key: &Q, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        with_keyed!(&self.table, t => t
            .force(key, cost, &self.clock, &self.bounds)
            .unwrap_or_else(|_| t.full_decision(cost, self.bounds.full_retry)))
    }

    /// Admits and charges the largest cost `k <= max` that `key` admits now
    /// (on every limit), for units spent one by one elsewhere; give back
    /// what goes unused with [`Limiter::refund`]. `k` may be 0: the lease's
    /// decision then says when one unit fits. A key held by a
    /// [`Reservation`] grants nothing before the reservation's time, and
    /// under [`OnFull::Reject`] a new key that cannot be tracked gets
    /// nothing. A policy with a sliding log refuses ([`LeaseError`]).
    pub fn lease<Q>(&self, key: &Q, max: u64) -> Result<Lease, LeaseError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // Refused before any lookup, whatever the key's state.
        if let Some(log) = self
            .policy
            .limits()
            .iter()
            .find(|l| l.algorithm == Algorithm::SlidingLog)
        {
            return Err(LeaseError::NotLeasable(log.algorithm));
        }
        with_keyed!(&self.table, t => t
        .lease(key, max, &self.clock, &self.bounds)
        .unwrap_or_else(|_| Ok(Lease {
            granted: 0,
            decision: t.full_decision(max.min(1), self.bounds.full_retry),
        })))
    }

    /// Charges `cost` for `key` at the earliest time it fits and returns a
    /// [`Reservation`] saying when the request may go, provided that is
    /// within `max_wait`.
    ///
    /// Exact semantics: if the policy admits the request now, it is charged
    /// now and may go now, or for the leaky queue after its `delay`. If not,
    /// it is charged at `now + retry_after` (the core's exact wait), and may
    /// go then (plus the queue's delay). Because a key's clock never runs
    /// backwards, the key is then *held* until that time: every other charge
    /// for it is refused until the reservation's time, with a `retry_after`
    /// that counts the hold, so nothing jumps the queue and nothing goes
    /// over the quota in real time. Returns [`WaitError::NeverFits`] if the
    /// cost can never fit and [`WaitError::TooLate`] (charging nothing) if
    /// the wait exceeds `max_wait`.
    pub fn reserve<Q>(
        &self,
        key: &Q,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Reservation<'_, K, C>, WaitError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let max_wait = nanos(max_wait);
        let reserved = with_keyed!(
            &self.table,
            t => t.reserve(key, cost, max_wait, &self.clock, &self.bounds)
        )?;
        Ok(Reservation {
            limiter: self,
            key: key.to_owned(),
            cost,
            ready_at: reserved.ready_at,
            decision: reserved.decision,
        })
    }

    /// Sweeps a bounded part of one shard (the next in turn): looks at up
    /// to `budget` buckets and forgets the keys that have been back to their
    /// initial state for the idle grace. Locks one shard, briefly; never the
    /// whole limiter. Returns how many keys it removed.
    ///
    /// A table about to grow sweeps first, which bounds memory while keys
    /// churn; call this (for example from a timer) to give memory back
    /// when no new keys come.
    pub fn sweep_step(&self, budget: usize) -> usize {
        let shard = self.sweep_next.fetch_add(1, Ordering::Relaxed);
        with_keyed!(&self.table, t => t.sweep_shard(shard, budget, &self.clock, &self.bounds).0)
    }

    /// Sweeps every shard once through, one shard and 1,024 buckets at a
    /// time, so other threads keep working meanwhile. Returns how many keys
    /// it removed.
    pub fn sweep(&self) -> usize {
        const CHUNK: usize = 1024;
        with_keyed!(&self.table, t => {
            let mut removed = 0;
            for shard in 0..t.shard_count() {
                let mut looked = 0;
                loop {
                    let (r, buckets) = t.sweep_shard(shard, CHUNK, &self.clock, &self.bounds);
                    removed += r;
                    looked += CHUNK;
                    if looked >= buckets {
                        break;
                    }
                }
            }
            removed
        })
    }

    /// Keys tracked now.
    pub fn len(&self) -> usize {
        self.bounds.keys.load(Ordering::Relaxed)
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The policy this limiter enforces.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The limiter's clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

#[cfg(feature = "async")]
impl<K: Hash + Eq, C: AsyncClock> Limiter<K, C> {
    /// Waits until `key` admits `cost`, then charges it and returns the
    /// admitting decision; gives up at once, charging nothing, when the
    /// wait would end after `deadline` from now ([`WaitError::TooLate`]) or
    /// the cost can never fit ([`WaitError::NeverFits`]).
    ///
    /// Waiting is sleeping on the limiter's clock (tokio's timer for
    /// [`MonotonicClock`]), never polling. Nothing is charged while waiting:
    /// if the slot is taken by another caller in the meantime, it waits for
    /// the next one, still within the deadline. Dropping the future gives up
    /// with nothing to give back.
    pub async fn until_ready<Q>(
        &self,
        key: &Q,
        cost: u64,
        deadline: Duration,
    ) -> Result<Decision, WaitError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let deadline = nanos(deadline);
        let give_up = self.clock.now().saturating_add(deadline);
        loop {
            let decision = self.try_check_cost(key, cost)?;
            let wait = match decision.retry_after {
                RetryAfter::Now => return Ok(decision),
                RetryAfter::After(wait) => wait,
                RetryAfter::Never => return Err(WaitError::NeverFits(decision)),
            };
            let now = self.clock.now();
            if now.saturating_add(wait) > give_up {
                return Err(WaitError::TooLate { wait });
            }
            self.clock.sleep(Duration::from_nanos(wait)).await;
        }
    }
}

/// `duration` in nanoseconds, saturating.
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// A request charged ahead by [`Limiter::reserve`]: it may go at
/// [`Reservation::ready_at`]. Dropping it keeps the charge (the request is
/// expected to go); [`Reservation::cancel`] gives it back.
#[must_use = "a reservation says when the request may go"]
pub struct Reservation<'a, K, C: Clock> {
    limiter: &'a Limiter<K, C>,
    key: K,
    cost: u64,
    ready_at: u64,
    decision: Decision,
}

impl<K: Hash + Eq, C: Clock> Reservation<'_, K, C> {
    /// When the request may go, in ns on the limiter's clock.
    pub fn ready_at(&self) -> u64 {
        self.ready_at
    }

    /// How long from now until the request may go (0 if it may go now).
    pub fn wait(&self) -> Duration {
        Duration::from_nanos(self.ready_at.saturating_sub(self.limiter.clock.now()))
    }

    /// The decision of the charge, as of the time it was made for.
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// Gives the cost back (see [`Limiter::refund`]): for a request that
    /// will not go. The key's clock stays at the reservation's time, so
    /// the room it frees is usable from that time on.
    pub fn cancel(self) {
        self.limiter.refund(&self.key, self.cost);
    }
}

#[cfg(feature = "async")]
impl<K: Hash + Eq, C: AsyncClock> Reservation<'_, K, C> {
    /// Sleeps on the limiter's clock until the request may go.
    pub async fn ready(&self) {
        let wait = self.wait();
        if !wait.is_zero() {
            self.limiter.clock.sleep(wait).await;
        }
    }
}
