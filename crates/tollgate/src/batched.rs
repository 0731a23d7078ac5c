//! [`Batched`]: batched reservations over any [`Backend`]. A hot key's
//! units are leased from the store `batch` at a time in one atomic call
//! ([`BackendExt::lease`]) and spent in process with no round trip.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::futures::OwnedNotified as Notified;
use tokio::sync::Notify;
use tollgate_core::{Algorithm, Decision, Lease, LeaseError, RetryAfter};

use crate::counters::counters;
use crate::{Backend, BackendError, BackendExt, Clock, MonotonicClock, Operation, Outcome, Policy};

/// Options of [`Batched`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchConfig {
    batch: u64,
    hot_rate: u32,
    max_leases: usize,
    lease_ttl: Duration,
}

impl Default for BatchConfig {
    /// Leases of 10, keys hot from 20 requests a second, at most 10,000
    /// leases held, each kept at most 1 s.
    fn default() -> Self {
        BatchConfig {
            batch: 10,
            hot_rate: 20,
            max_leases: 10_000,
            lease_ttl: Duration::from_secs(1),
        }
    }
}

impl BatchConfig {
    /// Units asked for per lease (at least 1). The overshoot bound is
    /// `instances * batch`.
    pub fn batch(mut self, batch: u64) -> Self {
        self.batch = batch.max(1);
        self
    }

    /// Requests per second from which a key is leased (0: every key).
    pub fn hot_rate(mut self, per_second: u32) -> Self {
        self.hot_rate = per_second;
        self
    }

    /// The most keys holding a lease at once.
    pub fn max_leases(mut self, leases: usize) -> Self {
        self.max_leases = leases;
        self
    }

    /// How long a lease is spent from before its rest is refunded.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// The lease TTL set: how often [`Batched::refund_expired`] is worth
    /// running.
    pub fn ttl(&self) -> Duration {
        self.lease_ttl
    }
}

counters! {
    /// Counts of what a [`Batched`] did since it was built.
    pub struct BatchStats, kept in Counters {
        /// Calls made to the store (checks, leases and refunds).
        store_calls,
        /// Of those, leases.
        leases,
        /// Of those, refunds of unspent units.
        refunds,
        /// Units given back by those refunds.
        refunded_units,
        /// Decisions made in process (spent from a lease or a kept denial).
        local_decisions,
    }
}

/// A [`Backend`] that leases hot keys' units in batches.
///
/// ```
/// # async fn demo() -> Result<(), tollgate::BackendError> {
/// use tollgate::{Algorithm, BatchConfig, Batched, Limit, MemoryBackend, Quota, Store};
///
/// let policy = Limit::new(Algorithm::TokenBucket, Quota::per_second(1000).unwrap());
/// let config = BatchConfig::default().batch(10).hot_rate(5);
/// let store = Store::new(policy, Batched::new(MemoryBackend::new(), config))?;
/// for _ in 0..100 {
///     assert!(store.check("hot-key").await?.allowed);
/// }
/// // The first requests go to the store one by one; once the key is hot,
/// // one lease serves ten requests.
/// assert!(store.backend().stats().store_calls < 30);
/// store.backend().shutdown().await; // gives back what was not spent
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(demo()).unwrap();
/// ```
///
/// # Which keys are leased
///
/// A key becomes hot when it sees at least `hot_rate` requests within one
/// second (this second or the last), and stays hot while it does. At most
/// `max_leases` keys hold units at a time; beyond that, and for cold keys,
/// each request goes to the store. A lease spent down to nothing is
/// renewed by the next request (the key's other requests wait for it
/// rather than going to the store); a lease older than `lease_ttl` is refunded
/// (what is left of it) by the next request for the key, by
/// [`Batched::refund_expired`], or by [`Batched::shutdown`].
///
/// A lease that grants nothing is a denial: its `retry_after` is kept, and
/// the key's requests until then are denied in process, without a call.
///
/// # Which algorithms
///
/// The token bucket, GCRA and the leaky meter lease units of their bucket;
/// the fixed window and the sliding counter lease a slice of the current
/// window. The sliding log cannot be leased (it needs the time of every
/// request in one place): [`Backend::prepare`] refuses a policy with one
/// (or, to decide it in the store unbatched, prepare it with the wrapped
/// backend and [`Batch::unbatched`]).
/// The leaky queue's admitted requests carry a release delay only the
/// store can compute, so its keys are always decided by the store.
///
/// # Overshoot
///
/// Units are charged in the store when leased, so they count against the
/// window in which they were leased. Spent in a later window, they add to
/// what the store admits there: in any window, the fleet admits at most the
/// policy's own bound plus `instances * batch` (each instance holds at most
/// `batch` unspent units of a key). A smaller `lease_ttl` returns idle units
/// sooner; a smaller `batch` lowers the bound and raises the store's load.
///
/// Decisions spent from a lease are admissions whose `remaining` is the
/// store's at the time of the lease plus the units still held here, an
/// estimate: other instances spend too.
pub struct Batched<B: Backend, C = MonotonicClock> {
    backend: B,
    config: BatchConfig,
    clock: C,
    state: Mutex<Keys<B::Prepared>>,
    counters: Counters,
}

/// A policy prepared by a [`Batched`]: the wrapped store's preparation and,
/// when its keys can be leased, the number of its table of keys.
#[derive(Clone, Debug)]
pub struct Batch<P> {
    inner: P,
    table: Option<usize>,
}

impl<P> Batch<P> {
    /// A policy of the wrapped store decided there call by call, never
    /// leased: for a caller that batches what it can and sends the rest
    /// (a sliding log) straight to the store.
    pub fn unbatched(inner: P) -> Self {
        Batch { inner, table: None }
    }

    /// The wrapped store's preparation of the policy.
    pub fn inner(&self) -> &P {
        &self.inner
    }
}

/// The keys being watched or leased, one table per prepared policy.
struct Keys<P> {
    /// Each prepared policy's table, so preparing it again (a reload)
    /// finds the same keys.
    tables_by_policy: HashMap<Policy, usize>,
    tables: Vec<Table<P>>,
    tracked: usize,
    leases: usize,
}

/// One policy's keys, with the wrapped store's preparation to give their
/// units back with.
struct Table<P> {
    inner: P,
    entries: HashMap<String, Entry>,
}

#[derive(Debug, Default)]
struct Entry {
    /// Second (on the clock) of `this_second`, and the requests in it and
    /// in the one before.
    second: u64,
    this_second: u32,
    last_second: u32,
    /// Unspent leased units, when they were leased, and the store's view.
    held: u64,
    leased_at: u64,
    view: Option<Decision>,
    /// A lease is on its way: other requests of the key wait for it.
    leasing: Option<Arc<Notify>>,
    /// Denied in process until then (from a lease that granted nothing).
    denied_until: u64,
}

const SECOND: u64 = 1_000_000_000;

/// What a request does once the map is unlocked.
enum Step {
    Done(Decision),
    Lease,
    Wait(Notified),
    Store,
}

/// Wakes the requests waiting for a lease even if the leasing request is
/// dropped (for example by a deadline above) before the lease settles.
struct Leasing<'a, B: Backend, C> {
    layer: &'a Batched<B, C>,
    key: &'a str,
    table: usize,
}

impl<B: Backend, C> Drop for Leasing<'_, B, C> {
    fn drop(&mut self) {
        let mut keys = self.layer.state.lock();
        let entry = keys
            .tables
            .get_mut(self.table)
            .and_then(|t| t.entries.get_mut(self.key));
        if let Some(notify) = entry.and_then(|e| e.leasing.take()) {
            notify.notify_waiters();
        }
    }
}

impl<B: Backend> Batched<B> {
    /// Batches `backend`'s hot keys as `config` says, on the monotonic
    /// clock.
    pub fn new(backend: B, config: BatchConfig) -> Self {
        Batched::with_clock(backend, config, MonotonicClock::new())
    }
}

impl<B: Backend, C: Clock> Batched<B, C> {
    /// The same on `clock` (a [`FakeClock`](crate::FakeClock) in tests).
    pub fn with_clock(backend: B, config: BatchConfig, clock: C) -> Self {
        Batched {
            backend,
            config,
            clock,
            state: Mutex::new(Keys {
                tables_by_policy: HashMap::new(),
                tables: Vec::new(),
                tracked: 0,
                leases: 0,
            }),
            counters: Counters::default(),
        }
    }

    /// The wrapped backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// What the layer did so far.
    pub fn stats(&self) -> BatchStats {
        self.counters.snapshot()
    }

    /// Keys holding leased units now.
    pub fn leases_held(&self) -> usize {
        self.state.lock().leases
    }

    /// Refunds the rest of every lease older than the lease TTL; run it
    /// every so often so a key that went quiet gives its units back.
    /// Returns the units refunded.
    pub async fn refund_expired(&self) -> u64 {
        let now = self.clock.now();
        let ttl = self.ttl_ns();
        self.refund_where(|e| now.saturating_sub(e.leased_at) >= ttl)
            .await
    }

    /// Refunds every unspent unit (for a process about to stop). Returns
    /// the units refunded.
    pub async fn shutdown(&self) -> u64 {
        self.refund_where(|_| true).await
    }

    async fn refund_where(&self, due: impl Fn(&Entry) -> bool) -> u64 {
        let taken: Vec<(B::Prepared, String, u64)> = {
            let mut keys = self.state.lock();
            let mut taken = Vec::new();
            for table in &mut keys.tables {
                for (key, entry) in table.entries.iter_mut() {
                    if entry.held > 0 && entry.leasing.is_none() && due(entry) {
                        taken.push((table.inner.clone(), key.clone(), entry.held));
                        entry.held = 0;
                    }
                }
            }
            keys.leases -= taken.len();
            taken
        };
        let mut total = 0;
        for (policy, key, units) in taken {
            if self.give_back(&key, &policy, units).await {
                total += units;
            }
        }
        total
    }

    /// Refunds `units` of `key`; a failed refund leaves them charged, which
    /// only ever admits less.
    async fn give_back(&self, key: &str, policy: &B::Prepared, units: u64) -> bool {
        self.counters.store_calls.fetch_add(1, Ordering::Relaxed);
        self.counters.refunds.fetch_add(1, Ordering::Relaxed);
        match self.backend.refund(key, policy, units).await {
            Ok(_) => {
                self.counters
                    .refunded_units
                    .fetch_add(units, Ordering::Relaxed);
                true
            }
            Err(e) => {
                tracing::debug!(target: "tollgate::batched", error = %e, units, "refund of unspent leased units failed");
                false
            }
        }
    }

    fn ttl_ns(&self) -> u64 {
        u64::try_from(self.config.lease_ttl.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Looks at the key in process: spends from its lease, or says what to
    /// ask the store. Returns units to refund first (an expired lease).
    fn plan(&self, key: &str, table: usize, cost: u64, now: u64) -> (Step, u64) {
        let mut keys = self.state.lock();
        let keys = &mut *keys;
        let ttl = self.ttl_ns();
        // A table of another layer's making: nothing to spend from here.
        let Some(known) = keys.tables.get(table) else {
            return (Step::Store, 0);
        };
        if !known.entries.contains_key(key) {
            // Bound the keys watched for heat, like the leases.
            if keys.tracked >= self.config.max_leases.saturating_mul(8).max(64) {
                keys.tables.iter_mut().for_each(|t| {
                    t.entries.retain(|_, e| e.held > 0 || e.leasing.is_some());
                });
                keys.tracked = keys.tables.iter().map(|t| t.entries.len()).sum();
            }
            keys.tracked += 1;
            keys.tables[table]
                .entries
                .insert(key.to_owned(), Entry::default());
        }
        let Some(entry) = keys.tables[table].entries.get_mut(key) else {
            unreachable!("the entry was inserted above");
        };
        let second = now / SECOND;
        if second != entry.second {
            entry.last_second = if second == entry.second + 1 {
                entry.this_second
            } else {
                0
            };
            entry.second = second;
            entry.this_second = 0;
        }
        entry.this_second = entry.this_second.saturating_add(1);
        if now < entry.denied_until {
            let mut denied = entry.view.unwrap_or_else(|| refused(0));
            denied.allowed = false;
            denied.retry_after = RetryAfter::After(entry.denied_until - now);
            return (Step::Done(denied), 0);
        }
        let mut expired = 0;
        if entry.held > 0 && now.saturating_sub(entry.leased_at) >= ttl && entry.leasing.is_none() {
            expired = std::mem::take(&mut entry.held);
            keys.leases -= 1;
        }
        if entry.held >= cost {
            entry.held -= cost;
            if entry.held == 0 {
                keys.leases -= 1;
            }
            return (Step::Done(spent(entry)), expired);
        }
        let hot = entry.this_second.max(entry.last_second) >= self.config.hot_rate;
        let room = entry.held > 0 || keys.leases < self.config.max_leases;
        if hot && room && cost <= self.config.batch {
            if let Some(notify) = &entry.leasing {
                return (Step::Wait(Arc::clone(notify).notified_owned()), expired);
            }
            entry.leasing = Some(Arc::new(Notify::new()));
            return (Step::Lease, expired);
        }
        (Step::Store, expired)
    }

    /// Records a lease's outcome and spends `cost` from it if it can.
    fn settle(
        &self,
        key: &str,
        table: usize,
        cost: u64,
        now: u64,
        lease: &Result<Lease, BackendError>,
    ) -> Option<Decision> {
        let mut keys = self.state.lock();
        let keys = &mut *keys;
        let entry = keys.tables.get_mut(table)?.entries.get_mut(key)?;
        if let Some(notify) = entry.leasing.take() {
            notify.notify_waiters();
        }
        let lease = lease.as_ref().ok()?;
        if lease.granted == 0 {
            if let RetryAfter::After(wait) = lease.decision.retry_after {
                entry.denied_until = now.saturating_add(wait);
            }
            entry.view = Some(lease.decision);
            return Some(lease.decision);
        }
        if entry.held == 0 {
            keys.leases += 1;
        }
        entry.held += lease.granted;
        entry.leased_at = now;
        entry.view = Some(lease.decision);
        if entry.held < cost {
            return None;
        }
        entry.held -= cost;
        if entry.held == 0 {
            keys.leases -= 1;
        }
        Some(spent(entry))
    }
}

/// A decision spent from `entry`'s lease.
fn spent(entry: &Entry) -> Decision {
    let view = entry.view.unwrap_or_else(|| refused(0));
    Decision {
        allowed: true,
        limit: view.limit,
        remaining: view.remaining.saturating_add(entry.held),
        retry_after: RetryAfter::Now,
        reset_after: view.reset_after,
        delay: 0,
    }
}

/// Placeholder numbers before the store was ever asked (only reachable
/// through a lease that reported nothing).
fn refused(limit: u64) -> Decision {
    Decision {
        allowed: false,
        limit,
        remaining: 0,
        retry_after: RetryAfter::Now,
        reset_after: 0,
        delay: 0,
    }
}

/// Whether `policy`'s keys can be leased at all (see the [`Batched`] docs).
fn leasable(policy: &Policy) -> bool {
    policy
        .limits()
        .iter()
        .all(|l| !matches!(l.algorithm, Algorithm::SlidingLog | Algorithm::LeakyQueue))
}

impl<B: Backend, C: Clock> Backend for Batched<B, C> {
    type Prepared = Batch<B::Prepared>;

    fn prepare(&self, policy: &Policy) -> Result<Self::Prepared, BackendError> {
        if policy
            .limits()
            .iter()
            .any(|l| l.algorithm == Algorithm::SlidingLog)
        {
            let why = LeaseError::NotLeasable(Algorithm::SlidingLog);
            return Err(BackendError::UnsupportedPolicy(format!(
                "batched reservations: {why}"
            )));
        }
        let inner = self.backend.prepare(policy)?;
        if !leasable(policy) {
            return Ok(Batch::unbatched(inner));
        }
        let mut keys = self.state.lock();
        let keys = &mut *keys;
        let table = *keys
            .tables_by_policy
            .entry(policy.clone())
            .or_insert_with(|| {
                keys.tables.push(Table {
                    inner: inner.clone(),
                    entries: HashMap::new(),
                });
                keys.tables.len() - 1
            });
        Ok(Batch {
            inner,
            table: Some(table),
        })
    }

    /// Checks of a leasable policy may be spent from a lease; every other
    /// operation goes to the store (a reset dropping what is held first).
    async fn apply(
        &self,
        key: &str,
        policy: &Self::Prepared,
        op: Operation,
    ) -> Result<Outcome, BackendError> {
        match (op, policy.table) {
            (Operation::Check(cost), Some(table)) if cost > 0 => self
                .check_batched(key, &policy.inner, table, cost)
                .await
                .map(Outcome::Decided),
            (Operation::Reset, Some(table)) => {
                self.forget(key, table);
                self.store_call(key, &policy.inner, op).await
            }
            _ => self.store_call(key, &policy.inner, op).await,
        }
    }
}

impl<B: Backend, C: Clock> Batched<B, C> {
    /// `op` made in the store, counted.
    async fn store_call(
        &self,
        key: &str,
        policy: &B::Prepared,
        op: Operation,
    ) -> Result<Outcome, BackendError> {
        self.counters.store_calls.fetch_add(1, Ordering::Relaxed);
        self.backend.apply(key, policy, op).await
    }

    /// A check spent from the key's lease when it holds one, else (a hot
    /// key) from a new lease, else decided in the store.
    async fn check_batched(
        &self,
        key: &str,
        policy: &B::Prepared,
        table: usize,
        cost: u64,
    ) -> Result<Decision, BackendError> {
        loop {
            let now = self.clock.now();
            let (step, expired) = self.plan(key, table, cost, now);
            if expired > 0 {
                self.give_back(key, policy, expired).await;
            }
            match step {
                Step::Done(decision) => {
                    self.counters
                        .local_decisions
                        .fetch_add(1, Ordering::Relaxed);
                    return Ok(decision);
                }
                Step::Wait(lease) => lease.await,
                Step::Lease => {
                    let _wakes = Leasing {
                        layer: self,
                        key,
                        table,
                    };
                    self.counters.store_calls.fetch_add(1, Ordering::Relaxed);
                    self.counters.leases.fetch_add(1, Ordering::Relaxed);
                    let lease = self.backend.lease(key, policy, self.config.batch).await;
                    if let Some(decision) = self.settle(key, table, cost, now, &lease) {
                        return Ok(decision);
                    }
                    // A failed lease reports the store's error; a lease
                    // smaller than the cost falls through to an exact
                    // decision.
                    lease?;
                    break;
                }
                Step::Store => break,
            }
        }
        self.store_call(key, policy, Operation::Check(cost))
            .await?
            .into_decision()
    }
}

impl<B: Backend, C> Batched<B, C> {
    /// Drops what is held for `key` (its state in the store is being reset,
    /// units and all).
    fn forget(&self, key: &str, table: usize) {
        let mut keys = self.state.lock();
        let removed = keys
            .tables
            .get_mut(table)
            .and_then(|t| t.entries.remove(key));
        if let Some(entry) = removed {
            keys.tracked -= 1;
            if entry.held > 0 {
                keys.leases -= 1;
            }
        }
    }
}
