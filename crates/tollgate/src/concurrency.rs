//! [`ConcurrencyLimiter`]: at most N requests in flight per key.

use std::borrow::Borrow;
use std::hash::Hash;
use std::ops::Deref;
use std::sync::Arc;

use crate::sharded::{default_shards, ShardedMap, Sizing};

/// Caps how many requests per key are in flight at once.
///
/// [`ConcurrencyLimiter::try_acquire`] hands out a [`Permit`]; dropping it
/// releases the slot, which Rust does on every way out of a scope: return,
/// `?`, a panic unwinding, or a future dropped mid-`await` (a cancelled
/// task). A key with nothing in flight takes no memory.
///
/// ```
/// use tollgate::ConcurrencyLimiter;
///
/// let limiter = ConcurrencyLimiter::new(2);
/// let a = limiter.try_acquire("tenant-1").unwrap();
/// let _b = limiter.try_acquire("tenant-1").unwrap();
/// assert!(limiter.try_acquire("tenant-1").is_err());
/// drop(a);
/// assert!(limiter.try_acquire("tenant-1").is_ok());
/// ```
pub struct ConcurrencyLimiter<K> {
    max_in_flight: u64,
    in_flight: ShardedMap<K, u64>,
}

/// No slot was free for the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{in_flight} requests already in flight for this key (the maximum)")]
pub struct AtCapacity {
    /// Requests in flight for the key.
    pub in_flight: u64,
}

/// One slot of a key's concurrency, released when dropped.
///
/// `L` is how the permit reaches its limiter: a reference
/// ([`ConcurrencyLimiter::try_acquire`]) or an `Arc`
/// ([`ConcurrencyLimiter::try_acquire_owned`], for spawned tasks).
#[must_use = "the slot is released as soon as the permit is dropped"]
pub struct Permit<K: Hash + Eq, L: Deref<Target = ConcurrencyLimiter<K>>> {
    limiter: L,
    key: Option<K>,
}

impl<K: Hash + Eq> ConcurrencyLimiter<K> {
    /// At most `max_in_flight` requests per key at once.
    pub fn new(max_in_flight: u64) -> Self {
        ConcurrencyLimiter {
            max_in_flight,
            // Never read without the lock: a release that empties a key
            // removes it without waiting for readers.
            in_flight: ShardedMap::locked_only(Sizing::growing(default_shards())),
        }
    }

    /// Takes a slot for `key`, or says how many are in flight.
    pub fn try_acquire<Q>(&self, key: &Q) -> Result<Permit<K, &Self>, AtCapacity>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.take(key)?;
        Ok(Permit {
            limiter: self,
            key: Some(key.to_owned()),
        })
    }

    /// Like [`ConcurrencyLimiter::try_acquire`], with a permit that owns a
    /// handle on the limiter, so it can move into a spawned task.
    pub fn try_acquire_owned<Q>(
        self: &Arc<Self>,
        key: &Q,
    ) -> Result<Permit<K, Arc<Self>>, AtCapacity>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.take(key)?;
        Ok(Permit {
            limiter: Arc::clone(self),
            key: Some(key.to_owned()),
        })
    }

    /// Requests in flight for `key`.
    pub fn in_flight<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let located = self.in_flight.locate(key);
        located
            .shard
            .table
            .find(located.hash, |(k, _)| k.borrow() == key)
            .map_or(0, |(_, n)| *n)
    }

    fn take<Q>(&self, key: &Q) -> Result<(), AtCapacity>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut located = self.in_flight.locate(key);
        let hash = located.hash;
        if let Some((_, n)) = located
            .shard
            .table
            .find_mut(hash, |(k, _)| k.borrow() == key)
        {
            if *n >= self.max_in_flight {
                return Err(AtCapacity { in_flight: *n });
            }
            *n += 1;
            return Ok(());
        }
        if self.max_in_flight == 0 {
            return Err(AtCapacity { in_flight: 0 });
        }
        self.in_flight.insert(&mut located, key.to_owned(), 1);
        Ok(())
    }

    fn release(&self, key: &K) {
        let mut located = self.in_flight.locate(key);
        if let Some(n) = located.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                located.remove(key);
            }
        }
    }
}

impl<K: Hash + Eq, L: Deref<Target = ConcurrencyLimiter<K>>> Drop for Permit<K, L> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.limiter.release(&key);
        }
    }
}
