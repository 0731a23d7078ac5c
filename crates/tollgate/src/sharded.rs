//! A hash map split into independently locked shards.
//!
//! One hash of the key picks the shard and finds the slot in that shard's
//! table, so a lookup hashes once. Threads working on keys of different
//! shards never touch the same lock; each shard sits on its own cache lines
//! so they do not share one either.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::shard_lock::{ShardLock, WriteGuard};
use hashbrown::HashTable;

use crate::huge::HugePages;

/// Keys and their values, in shards chosen by key hash.
pub(crate) struct ShardedMap<K, V> {
    shards: Box<[Locked<K, V>]>,
    hasher: foldhash::fast::RandomState,
}

/// A shard behind its lock, alone on its cache lines (128 bytes: adjacent
/// line prefetch pairs 64-byte lines) so shards never share one.
#[repr(align(128))]
struct Locked<K, V> {
    hint: SlotHint,
    /// Whether denials are decided under the shared lock ([`Probe::shared`]):
    /// set when a denial was decided after waiting for the exclusive lock
    /// (threads queueing for a key they are refused), cleared by the next
    /// admitted charge or a shared read that finds nobody else in the
    /// lock. Uncontended, the exclusive path is the faster one.
    /// Written only when it changes.
    shared_reads: AtomicBool,
    shard: ShardLock<Shard<K, V>>,
}

/// Where a shard's table keeps a key's control bytes and slot, so both can
/// be fetched from memory at once, before the lock is even taken.
///
/// In a large table a lookup makes two dependent cache misses: the control
/// bytes of the key's bucket group, then the slot they point to. Nearly
/// every key sits in or next to its home bucket, whose addresses follow
/// from the hash alone, so prefetching both overlaps the two misses. The
/// addresses rely on hashbrown's layout (slots stored downwards from the
/// control bytes, home bucket `hash & mask`); a prefetch is only a hint,
/// so were that layout to change, lookups would stay correct, only slower.
#[derive(Default)]
struct SlotHint {
    /// Address of the control bytes (where slot 0 ends); 0 before the
    /// table has memory.
    ctrl: AtomicUsize,
    /// Buckets minus one.
    mask: AtomicUsize,
}

impl SlotHint {
    /// Prefetches the home bucket of `hash`: its control bytes and slot.
    #[inline(always)]
    fn prefetch<T>(&self, hash: u64) {
        let ctrl = self.ctrl.load(Ordering::Relaxed);
        if ctrl == 0 {
            return;
        }
        let home = hash as usize & self.mask.load(Ordering::Relaxed);
        prefetch(ctrl.wrapping_add(home));
        prefetch(ctrl.wrapping_sub((home + 1).wrapping_mul(std::mem::size_of::<T>())));
    }

    /// Whether the hint does not describe a table of `buckets` buckets.
    fn is_stale(&self, buckets: usize) -> bool {
        self.ctrl.load(Ordering::Relaxed) == 0
            || self.mask.load(Ordering::Relaxed) != buckets.wrapping_sub(1)
    }

    /// Records where the table is, from a slot's address and index.
    fn update<T>(&self, slot: &T, index: usize, buckets: usize) {
        let ctrl = slot as *const T as usize + (index + 1) * std::mem::size_of::<T>();
        self.ctrl.store(ctrl, Ordering::Relaxed);
        self.mask.store(buckets - 1, Ordering::Relaxed);
    }
}

/// Asks the CPU to bring the cache line of `address` in; never faults.
#[inline(always)]
fn prefetch(address: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing architecturally and cannot fault,
    // whatever the address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(address as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

/// One shard: its table and where its incremental sweep stands.
pub(crate) struct Shard<K, V> {
    pub(crate) table: HashTable<(K, V), HugePages>,
    /// The next bucket the sweep will look at.
    cursor: usize,
}

/// A key's hash and shard, before any lock is taken.
pub(crate) struct Probe<'a, K, V> {
    hash: u64,
    locked: &'a Locked<K, V>,
}

impl<'a, K, V> Probe<'a, K, V> {
    /// Whether denials in this shard are decided under the shared lock.
    #[inline(always)]
    pub(crate) fn shared_reads(&self) -> bool {
        self.locked.shared_reads.load(Ordering::Relaxed)
    }

    /// Sets whether denials in this shard are decided under the shared lock.
    #[inline(always)]
    pub(crate) fn set_shared_reads(&self, shared: bool) {
        if self.shared_reads() != shared {
            self.locked.shared_reads.store(shared, Ordering::Relaxed);
        }
    }

    /// `read` applied to the value stored for `key`, under the shard's
    /// shared lock: readers never wait for one another, so a key many
    /// threads only read (a hot key being denied) is not a queue on one
    /// lock. `None` if the key is not stored. Finding the lock free of
    /// anyone else, it turns shared reads off: uncontended, the exclusive
    /// path is the faster one.
    #[inline(always)]
    pub(crate) fn shared<Q, T>(&self, key: &Q, read: impl FnOnce(&V) -> T) -> Option<T>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let (shard, alone) = self.locked.shard.read();
        if alone {
            self.set_shared_reads(false);
        }
        shard
            .table
            .find(self.hash, |(k, _)| k.borrow() == key)
            .map(|(_, v)| read(v))
    }

    /// Locks the shard for writing.
    #[inline(always)]
    pub(crate) fn lock(&self) -> Located<'a, K, V> {
        let (shard, waited) = self.locked.shard.write();
        Located {
            hash: self.hash,
            hint: &self.locked.hint,
            shard,
            waited,
        }
    }
}

/// What a lookup found: the key's hash and its shard, locked.
pub(crate) struct Located<'a, K, V> {
    pub(crate) hash: u64,
    hint: &'a SlotHint,
    pub(crate) shard: WriteGuard<'a, Shard<K, V>>,
    /// Whether another thread held the shard when it was locked.
    pub(crate) waited: bool,
}

impl<K, V> Located<'_, K, V> {
    /// The value stored for `key` in the located shard, if any.
    #[inline(always)]
    pub(crate) fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.shard
            .table
            .find_mut(self.hash, |(k, _)| k.borrow() == key)
            .map(|(_, v)| v)
    }
}

impl<K: Hash + Eq, V> ShardedMap<K, V> {
    /// An empty map laid out as `sizing` says.
    pub(crate) fn new(sizing: Sizing) -> Self {
        ShardedMap {
            shards: (0..sizing.shards.max(1))
                .map(|_| Locked {
                    hint: SlotHint::default(),
                    shared_reads: AtomicBool::new(false),
                    shard: ShardLock::new(Shard {
                        table: HashTable::with_capacity_in(sizing.per_shard, HugePages),
                        cursor: 0,
                    }),
                })
                .collect(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// Hashes `key` and locks its shard for writing.
    #[inline]
    pub(crate) fn locate<Q>(&self, key: &Q) -> Located<'_, K, V>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.probe(key).lock()
    }

    /// Hashes `key` and finds its shard, without locking it.
    #[inline]
    pub(crate) fn probe<Q>(&self, key: &Q) -> Probe<'_, K, V>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        // The table takes its bucket from the low bits and its tags from
        // the top 7, so the shard comes from a remix of the whole hash (24
        // bits, any count of shards by multiplying and shifting): with some
        // seeds, foldhash's middle bits alone put a third more sequential
        // keys in one shard than in another.
        let mixed = (hash ^ (hash >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let bits = (mixed >> 40) as usize;
        let locked = &self.shards[(bits * self.shards.len()) >> 24];
        locked.hint.prefetch::<(K, V)>(hash);
        Probe { hash, locked }
    }

    /// Inserts a key known to be absent.
    pub(crate) fn insert(&self, located: &mut Located<'_, K, V>, key: K, value: V) {
        let hasher = &self.hasher;
        let table = &mut located.shard.table;
        let entry = table.insert_unique(located.hash, (key, value), |(k, _)| hasher.hash_one(k));
        let index = entry.bucket_index();
        // Only a growth moves the table (or the first key shows where it is).
        let buckets = table.num_buckets();
        if located.hint.is_stale(buckets) {
            if let Some(slot) = table.get_bucket(index) {
                located.hint.update(slot, index, buckets);
            }
        }
    }

    /// Decides denials under the shared lock in every shard from now on,
    /// as contention would: lets tests check that path on one thread.
    #[cfg(test)]
    pub(crate) fn share_reads(&self) {
        for locked in self.shards.iter() {
            locked.shared_reads.store(true, Ordering::Relaxed);
        }
    }

    /// Number of shards.
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Locks shard `index` (modulo the shard count).
    pub(crate) fn lock_shard(&self, index: usize) -> WriteGuard<'_, Shard<K, V>> {
        self.shards[index % self.shards.len()].shard.write().0
    }
}

/// Four shards per CPU, so two threads rarely meet on one lock.
pub(crate) fn default_shards() -> usize {
    let cpus = std::thread::available_parallelism().map_or(4, |n| n.get());
    (cpus * 4).next_power_of_two()
}

/// The most shards a map is split into.
const MAX_SHARDS: usize = 1 << 16;

/// How many shards a map has, and how many keys each shard's table is
/// allocated for up front.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sizing {
    pub(crate) shards: usize,
    pub(crate) per_shard: usize,
}

impl Sizing {
    /// `shards` shards whose tables start empty and grow as needed.
    pub(crate) fn growing(shards: usize) -> Self {
        Sizing {
            shards: shards.clamp(1, MAX_SHARDS),
            per_shard: 0,
        }
    }

    /// Between `min_shards` and twice that many shards, holding `keys` keys
    /// in the fewest buckets. A table's bucket count is a power of two and
    /// it grows when 7/8 full, so a key count between two powers of two
    /// leaves tables half empty; choosing the shard count (any number, not
    /// only a power of two) to fit the keys keeps them nearly 7/8 full
    /// instead. 2% of each table is kept spare for keys spreading unevenly
    /// over the shards.
    pub(crate) fn for_keys(keys: usize, min_shards: usize) -> Self {
        let min_shards = min_shards.clamp(1, MAX_SHARDS / 2);
        (min_shards..2 * min_shards)
            .map(|shards| {
                let per_shard = keys.div_ceil(shards);
                let needed = per_shard + per_shard / 49;
                // hashbrown's rule: room for 7/8 of the buckets (all of
                // them below 8).
                let buckets = (needed.saturating_mul(8) / 7).max(1).next_power_of_two();
                let room = if buckets < 8 {
                    buckets - 1
                } else {
                    buckets / 8 * 7
                };
                (
                    shards.saturating_mul(buckets),
                    Sizing {
                        shards,
                        per_shard: room.max(needed),
                    },
                )
            })
            .min_by_key(|(buckets, _)| *buckets)
            .map_or(Sizing::growing(min_shards), |(_, sizing)| sizing)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizing_for_a_million_keys_fills_tables_to_about_seven_eighths() {
        let sizing = Sizing::for_keys(1_000_000, 8);
        // Power-of-two growth takes 2^21 buckets; 9 shards of 2^17 do.
        assert_eq!(
            sizing,
            Sizing {
                shards: 9,
                per_shard: 114_688
            }
        );
    }

    #[test]
    fn sizing_holds_the_keys_with_the_shards_asked_for() {
        for keys in [0, 1, 100, 12_345, 10_000_000] {
            for min in [1, 8, 64] {
                let sizing = Sizing::for_keys(keys, min);
                assert!((min..2 * min).contains(&sizing.shards), "{keys} {min}");
                assert!(sizing.shards * sizing.per_shard >= keys, "{keys} {min}");
            }
        }
    }

    #[test]
    fn keys_spread_over_any_shard_count() {
        let map: ShardedMap<u64, ()> = ShardedMap::new(Sizing::growing(9));
        for key in 0..9_000u64 {
            let mut located = map.locate(&key);
            map.insert(&mut located, key, ());
        }
        for index in 0..9 {
            let len = map.lock_shard(index).table.len();
            assert!((800..1200).contains(&len), "shard {index}: {len}");
        }
    }
}
