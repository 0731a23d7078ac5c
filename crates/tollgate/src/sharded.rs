//! A hash map split into independently locked shards.
//!
//! One hash of the key picks the shard and finds the slot in that shard's
//! table, so a lookup hashes once. Threads working on keys of different
//! shards never touch the same lock; each shard sits on its own cache lines
//! so they do not share one either.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;
use parking_lot::{Mutex, MutexGuard};

use crate::huge::HugePages;

/// Keys and their values, in shards chosen by key hash.
pub(crate) struct ShardedMap<K, V> {
    shards: Box<[Locked<K, V>]>,
    hasher: foldhash::fast::RandomState,
}

/// A shard behind its lock, alone on its cache lines (128 bytes: adjacent
/// line prefetch pairs 64-byte lines) so shards never share one.
#[repr(align(128))]
struct Locked<K, V>(Mutex<Shard<K, V>>);

/// One shard: its table and where its incremental sweep stands.
pub(crate) struct Shard<K, V> {
    pub(crate) table: HashTable<(K, V), HugePages>,
    /// The next bucket the sweep will look at.
    cursor: usize,
}

/// What a lookup found: the key's hash and its shard, locked.
pub(crate) struct Located<'a, K, V> {
    pub(crate) hash: u64,
    pub(crate) shard: MutexGuard<'a, Shard<K, V>>,
}

impl<K: Hash + Eq, V> ShardedMap<K, V> {
    /// A map of `shards` shards (rounded up to a power of two, at least 1).
    pub(crate) fn new(shards: usize) -> Self {
        let n = shards.max(1).next_power_of_two();
        ShardedMap {
            shards: (0..n)
                .map(|_| {
                    Locked(Mutex::new(Shard {
                        table: HashTable::new_in(HugePages),
                        cursor: 0,
                    }))
                })
                .collect(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// Hashes `key` and locks its shard.
    #[inline]
    pub(crate) fn locate<Q>(&self, key: &Q) -> Located<'_, K, V>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        // The table uses the low bits for the bucket and the top 7 as tags;
        // bits 32 and up pick the shard without correlating with either.
        let index = (hash >> 32) as usize & (self.shards.len() - 1);
        Located {
            hash,
            shard: self.shards[index].0.lock(),
        }
    }

    /// Inserts a key known to be absent.
    pub(crate) fn insert(&self, located: &mut Located<'_, K, V>, key: K, value: V) {
        let hasher = &self.hasher;
        located
            .shard
            .table
            .insert_unique(located.hash, (key, value), |(k, _)| hasher.hash_one(k));
    }

    /// Number of shards.
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Locks shard `index` (modulo the shard count).
    pub(crate) fn lock_shard(&self, index: usize) -> MutexGuard<'_, Shard<K, V>> {
        self.shards[index & (self.shards.len() - 1)].0.lock()
    }
}

/// Four shards per CPU, so two threads rarely meet on one lock.
pub(crate) fn default_shards() -> usize {
    let cpus = std::thread::available_parallelism().map_or(4, |n| n.get());
    (cpus * 4).next_power_of_two()
}

impl<K, V> Shard<K, V> {
    /// Looks at the next `budget` buckets from the sweep cursor and removes
    /// the entries `expired` says are done with. Returns how many it removed.
    pub(crate) fn sweep(&mut self, budget: usize, mut expired: impl FnMut(&V) -> bool) -> usize {
        let buckets = self.table.num_buckets();
        if self.table.is_empty() {
            return 0;
        }
        let mut removed = 0;
        for _ in 0..budget.min(buckets) {
            let index = self.cursor;
            self.cursor = (self.cursor + 1) % buckets;
            if let Ok(entry) = self.table.get_bucket_entry(index) {
                if expired(&entry.get().1) {
                    entry.remove();
                    removed += 1;
                }
            }
        }
        removed
    }

    /// Buckets in this shard's table (occupied or not).
    pub(crate) fn buckets(&self) -> usize {
        self.table.num_buckets()
    }
}
