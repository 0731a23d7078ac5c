//! A hash map split into independently locked shards.
//!
//! One hash of the key picks the shard and finds the slot in that shard's
//! table, so a lookup hashes once. Threads working on keys of different
//! shards never touch the same lock; each shard sits on its own cache lines
//! so they do not share one either.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crate::owned_keys;
use crate::readers;
use crate::shard_lock::{ShardLock, WriteGuard};
use crate::table::{self, home, Table};

/// Keys and their values, in shards chosen by key hash.
pub(crate) struct ShardedMap<K, V> {
    shards: Box<[Locked<K, V>]>,
    hasher: foldhash::fast::RandomState,
}

/// A shard behind its lock, alone on its cache lines (128 bytes: adjacent
/// line prefetch pairs 64-byte lines) so shards never share one.
///
/// What a check reads before it takes the lock sits on lines of its own
/// ([`Ahead`]), apart from the lock word every check writes: with two
/// threads on many keys, the lock's line is in the other core's cache half
/// the time, and the table's prefetches, which the hint addresses, then go
/// out while that line is on its way instead of after it arrived.
#[repr(C, align(128))]
struct Locked<K, V> {
    ahead: Ahead,
    /// The last turn on the lock ([`TURN_TOKEN`]; 0 for none), for maps read
    /// without it; written under the lock, and only when it changes hands.
    /// One word, thread and key together: a second word beside the lock
    /// word pushed the table's header further along the lines threads on
    /// one key pass between them, and measured slower.
    last: AtomicU64,
    shard: ShardLock<Shard<K, V>>,
}

/// A shard's last turn ([`Locked::last`]) says who took the lock when it
/// last changed hands, and for which key: the thread's token in these low
/// 48 bits (an address: user space is below 2^48) and the top 16 bits of
/// the key's hash above. The two serve only to choose a path
/// ([`Locked::changed_hands`]): a token or key mistaken for another costs
/// time, never a wrong decision.
const TURN_TOKEN: u64 = (1 << 48) - 1;

/// The read-mostly part of a shard: written only when the table moves or
/// the way denials are tried changes.
#[repr(align(128))]
struct Ahead {
    hint: SlotHint,
    /// Whether denials are first tried without the lock ([`Probe::peek`]):
    /// set when a denial was decided with the shard contended (threads
    /// taking turns on a key they are refused: see [`Located::contended`]),
    /// cleared by the next charge or when [`Probe::peek`], taking the lock
    /// now and then, finds the shard uncontended. Uncontended, the
    /// locked path is the faster one (it looks the key up once whatever the
    /// answer). Written only when it changes.
    peek_first: AtomicBool,
    /// The most keys this shard's table may hold for the whole map to fit
    /// in [`CACHED_BYTES`] (see [`Locked::changed_hands`]).
    cached_keys: usize,
    /// Whether keys that own memory are compared without the lock
    /// ([`ShardedMap::reads_owned_keys`]), decided when the map is made.
    owned_keys_read: bool,
}

/// About what one core's own cache holds (1 MiB): a map of no more bytes of
/// entries than this is taken to be in cache when two threads take turns
/// on it.
const CACHED_BYTES: usize = 1 << 20;

impl<K, V> Locked<K, V> {
    /// Whether another thread held the lock last, for the same key as this
    /// (by the top bits of its hash: the key it was taken for when it last
    /// changed hands) or in a map that fits in cache, making this thread
    /// and key its last; to be called with the lock held, `table` being the
    /// shard's. Two threads taking turns on a key move its lines
    /// between their cores at every turn, whether or not one ever waits
    /// for the other: on some machines the line moves so fast that the
    /// other thread is seldom caught holding the lock. In a map too large
    /// for a cache, two threads take turns on every shard by chance, on
    /// different keys: a check then waits for its key's line from memory
    /// anyway, the lock's line arrives meanwhile ([`Ahead`]), and the
    /// locked path, which looks the key up once, is the cheaper (1M keys,
    /// two threads refused: 166–179 ns a check against 191–212 read
    /// without the lock).
    #[inline(always)]
    fn changed_hands(&self, hash: u64, table: &Table<(K, V)>) -> bool {
        let (me, last) = (
            thread_token() as u64 & TURN_TOKEN,
            self.last.load(Ordering::Relaxed),
        );
        // Kept while the same thread takes turn after turn, whatever the
        // key: that costs one compare, as before keys were told apart.
        if last & TURN_TOKEN == me {
            return false;
        }
        let turn = me | (hash & !TURN_TOKEN);
        self.last.store(turn, Ordering::Relaxed);
        // 0: nobody held it yet. The table's length last: its header may
        // sit on the next line, one more to pass between cores.
        last != 0 && ((last ^ turn) & !TURN_TOKEN == 0 || table.len() <= self.ahead.cached_keys)
    }
}

thread_local! {
    static TOKEN: u8 = const { 0 };
}

/// A number no other running thread has: the address of a thread-local.
#[inline(always)]
fn thread_token() -> usize {
    TOKEN.with(|token| std::ptr::from_ref(token) as usize)
}

/// Where a shard's table keeps a key's control byte and slot, so both can
/// be fetched from memory at once, before the lock is even taken.
///
/// In a large table a lookup makes two dependent cache misses: the control
/// bytes of the key's home bucket, then the slot they point to. Nearly
/// every key sits in or next to its home bucket, whose addresses follow
/// from the hash alone, so prefetching both overlaps the two misses. Read
/// without the lock, the hint may describe a table just replaced: a
/// prefetch is only a hint and never faults, so lookups stay correct.
#[derive(Default)]
struct SlotHint {
    /// Address of the control bytes; 0 before the table has memory.
    tags: AtomicUsize,
    /// Address of the slots.
    slots: AtomicUsize,
    /// Home buckets.
    homes: AtomicUsize,
}

impl SlotHint {
    /// Prefetches the home bucket of `hash`: its control byte and slot.
    #[inline(always)]
    fn prefetch<T>(&self, hash: u64) {
        let tags = self.tags.load(Ordering::Relaxed);
        if tags == 0 {
            return;
        }
        let at = home(hash, self.homes.load(Ordering::Relaxed));
        prefetch(tags.wrapping_add(at));
        let slots = self.slots.load(Ordering::Relaxed);
        prefetch(slots.wrapping_add(at.wrapping_mul(std::mem::size_of::<T>())));
    }

    /// Records where `table` is, if it moved. Called under the shard's
    /// lock after anything that may have replaced the table.
    ///
    /// All three words are compared, not the control bytes' address alone:
    /// one insert may grow a table twice, and the newest table's control
    /// bytes may then be allocated where those of the table the hint
    /// described were (freed by the first growth). Compared on that address
    /// alone, the hint kept the older table's slot address and home count,
    /// memory freed and reused meanwhile: [`Probe::peek`] read "keys" at
    /// the wrong offsets in it (session 9's crash, a `String` whose pointer
    /// was a rate limiter's state). [`Probe::peek`] uses nothing but these
    /// three words, so once they all equal the current table's, the hint
    /// describes it exactly, whatever happened in between.
    fn update<T>(&self, table: &Table<T>) {
        let (tags, slots) = table.addresses();
        let homes = table.homes();
        if self.tags.load(Ordering::Relaxed) != tags
            || self.slots.load(Ordering::Relaxed) != slots
            || self.homes.load(Ordering::Relaxed) != homes
        {
            self.tags.store(tags, Ordering::Relaxed);
            self.slots.store(slots, Ordering::Relaxed);
            self.homes.store(homes, Ordering::Relaxed);
        }
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
    pub(crate) table: Table<(K, V)>,
    /// The next bucket the sweep will look at.
    cursor: usize,
    /// The map's hasher: removing a key moves others, which rehashes them.
    hasher: foldhash::fast::RandomState,
    /// Whether a removed key frees memory a read without the lock may be
    /// comparing ([`ShardedMap::reads_owned_keys`]): it is then dropped
    /// only once such reads end.
    frees_what_readers_see: bool,
}

/// A key's hash and shard, before any lock is taken.
pub(crate) struct Probe<'a, K, V> {
    hash: u64,
    locked: &'a Locked<K, V>,
}

impl<'a, K, V> Probe<'a, K, V> {
    /// Whether this map is ever read without the lock: known when compiled
    /// unless its keys own memory ([`ShardedMap::reads_owned_keys`]).
    #[inline(always)]
    pub(crate) fn reads_lock_free(&self) -> bool {
        ShardedMap::<K, V>::OWNING_NOTHING
            || (!std::mem::needs_drop::<V>() && self.locked.ahead.owned_keys_read)
    }

    /// Whether denials in this shard are first tried without the lock.
    #[inline(always)]
    pub(crate) fn peek_first(&self) -> bool {
        self.locked.ahead.peek_first.load(Ordering::Relaxed)
    }

    /// Sets whether denials in this shard are first tried without the lock.
    #[inline(always)]
    pub(crate) fn set_peek_first(&self, on: bool) {
        if self.peek_first() != on {
            self.locked.ahead.peek_first.store(on, Ordering::Relaxed);
        }
    }

    /// A copy of the value stored for `key`, read without the shard's
    /// lock and without writing to any line another thread uses (see
    /// [`crate::readers`]): threads refused on one hot key then do not move
    /// its lines between their cores. `None` if the key is not stored, a
    /// writer got in the way, this thread has no reader slot or its turn
    /// to take the lock came (`readers::enter`), or the map is never read
    /// so ([`Probe::reads_lock_free`]): the caller then takes the lock.
    #[inline(always)]
    pub(crate) fn peek<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        if !self.reads_lock_free() {
            return None;
        }
        let Some(_reading) = readers::enter() else {
            // Now and then the lock is taken instead, to see whether anyone
            // is still in the way: alone, the locked path is the cheaper.
            if !self.lock().contended {
                self.set_peek_first(false);
                readers::alone();
            }
            return None;
        };
        let lock = &self.locked.shard;
        let version = lock.read_version()?;
        let hint = &self.locked.ahead.hint;
        let tags = hint.tags.load(Ordering::Relaxed);
        let slots = hint.slots.load(Ordering::Relaxed);
        let homes = hint.homes.load(Ordering::Relaxed);
        // In tests, the table the three must describe: its header, copied
        // as the entries are (checked by the same version below).
        #[cfg(debug_assertions)]
        // SAFETY: a volatile bit copy of the header, never dropped, used
        // only if the version shows no writer came meanwhile.
        let header = unsafe {
            std::ptr::addr_of!((*lock.value_ptr()).table)
                .cast::<std::mem::MaybeUninit<Table<(K, V)>>>()
                .read_volatile()
        };
        // The three describe one table, and while this thread is announced
        // that table's memory stays allocated.
        if tags == 0 || !lock.unchanged(version) {
            return None;
        }
        #[cfg(debug_assertions)]
        {
            // SAFETY: whole, as the version shows; only its words are read.
            let table = unsafe { header.assume_init_ref() };
            assert_eq!(
                (tags, slots, homes),
                (table.addresses().0, table.addresses().1, table.homes()),
                "the slot hint describes another table than the shard's"
            );
        }
        // SAFETY (`table::peek`'s contract):
        // - The three words describe one table: they were loaded between
        //   `read_version` (no writer held the lock) and `unchanged` (none
        //   took it since), and every writer that replaces the table
        //   rewrites them under the lock (`SlotHint::update` compares all
        //   three, so they are the current table's, never an older one's).
        // - That table stays allocated during the call: this thread is
        //   announced (`_reading`) since before `read_version` saw the lock
        //   free, so a writer that replaces it after that frees the old
        //   memory only once this announcement ends (`readers::wait` in
        //   `Table::grow`); a writer that took the lock before would have
        //   failed `read_version` or `unchanged` above.
        // - `eq` takes a copy for a `(K, V)` only once `unchanged` shows no
        //   writer came since the version was read: the volatile copy was
        //   made before that load (`unchanged` fences it) of a bucket whose
        //   control byte, read before it too, said it was full, so it is
        //   the bits of a stored entry, whole. Only then does it compare
        //   the key, with the user's `Borrow` and `Eq` on a bit copy.
        // - Duplicating the bits is sound because `V` has no drop glue and
        //   `K` either has none or is one of `crate::owned_keys`'s types
        //   (`reads_lock_free`); the copy is never dropped. A key without
        //   drop glue owns no memory a writer could free under the
        //   comparison (what it refers to outlives the map). A listed key
        //   that owns memory is only read through `&K`, which reads that
        //   memory and changes nothing in it, and a writer that removes
        //   such a key drops it only after `readers::wait` (`Shard::remove`),
        //   which waits for this announcement to end.
        let entry = unsafe {
            table::peek::<(K, V)>(tags, slots, homes, self.hash, |entry| {
                lock.unchanged(version) && entry.assume_init_ref().0.borrow() == key
            })?
        };
        // SAFETY: the entry `peek` returns is one `eq` accepted, so whole
        // (above); `V` owns nothing, so its copy is a value of its own.
        Some(unsafe { std::ptr::read(&entry.assume_init_ref().1) })
    }

    /// Locks the shard for writing.
    #[inline(always)]
    pub(crate) fn lock(&self) -> Located<'a, K, V> {
        let shard = self.locked.shard.write();
        // Only maps read without the lock use it (known when compiled
        // unless keys own memory). A wait for the lock needs no test of its
        // own: the thread waited for then held it last.
        let contended =
            self.reads_lock_free() && self.locked.changed_hands(self.hash, &shard.table);
        Located {
            hash: self.hash,
            hint: &self.locked.ahead.hint,
            shard,
            contended,
        }
    }
}

/// What a lookup found: the key's hash and its shard, locked.
pub(crate) struct Located<'a, K, V> {
    pub(crate) hash: u64,
    hint: &'a SlotHint,
    pub(crate) shard: WriteGuard<'a, Shard<K, V>>,
    /// For maps read without the lock: whether another thread was the
    /// last to hold the shard, for the same key or in a map that fits in
    /// cache ([`Locked::changed_hands`]).
    pub(crate) contended: bool,
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

    /// Removes `key` from the located shard; its value if it was there.
    pub(crate) fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q> + Hash,
        Q: Eq + ?Sized,
    {
        let index = self
            .shard
            .table
            .find_index(self.hash, |(k, _)| k.borrow() == key)?;
        Some(self.shard.remove(index).1)
    }
}

impl<K, V> ShardedMap<K, V> {
    /// Whether neither keys nor values have drop glue (`u64`, `[u8; 16]`,
    /// `&str` borrowed for the map's life): [`Probe::peek`] then always
    /// reads the map without the lock, since no writer frees memory such a
    /// key or value refers to; only a table's growth frees memory a reader
    /// may look at (the old table, after `readers::wait`).
    const OWNING_NOTHING: bool = !std::mem::needs_drop::<K>() && !std::mem::needs_drop::<V>();

    /// Whether keys that own memory are read without the lock too: values
    /// own none and the key type is one whose copies may be compared while
    /// another thread owns the memory (`String`, `CompactKey`: see
    /// [`crate::owned_keys`]). Each removal of such a key then waits for
    /// the reads in progress before dropping it ([`Shard::remove`]).
    fn reads_owned_keys() -> bool {
        std::mem::needs_drop::<K>()
            && !std::mem::needs_drop::<V>()
            && owned_keys::readable_in_place::<K>()
    }
}

impl<K: Hash + Eq, V> ShardedMap<K, V> {
    /// An empty map laid out as `sizing` says, whose denials may be read
    /// without the lock ([`Probe::peek`]).
    pub(crate) fn new(sizing: Sizing) -> Self {
        Self::laid_out(sizing, Self::reads_owned_keys())
    }

    /// An empty map laid out as `sizing` says, for a caller that never
    /// reads it without the lock: removing a key that owns memory then
    /// never waits for readers ([`Shard::remove`]).
    pub(crate) fn locked_only(sizing: Sizing) -> Self {
        Self::laid_out(sizing, false)
    }

    /// An empty map whose keys that own memory are compared without the
    /// lock if `owned_keys_read`.
    fn laid_out(sizing: Sizing, owned_keys_read: bool) -> Self {
        let hasher = foldhash::fast::RandomState::default();
        let count = sizing.shards.max(1);
        ShardedMap {
            shards: (0..count)
                .map(|index| {
                    // Shards hold about as many keys each: with sizes a
                    // different fraction of a growth step along, they do not
                    // all stand just past a growth at once.
                    let phase = index as f64 / count as f64;
                    let table = Table::with_capacity(sizing.per_shard, phase);
                    let hint = SlotHint::default();
                    hint.update(&table);
                    Locked {
                        ahead: Ahead {
                            hint,
                            peek_first: AtomicBool::new(false),
                            cached_keys: CACHED_BYTES
                                / (count * std::mem::size_of::<(K, V)>()).max(1),
                            owned_keys_read,
                        },
                        last: AtomicU64::new(0),
                        shard: ShardLock::new(Shard {
                            table,
                            cursor: 0,
                            hasher: hasher.clone(),
                            frees_what_readers_see: owned_keys_read,
                        }),
                    }
                })
                .collect(),
            hasher,
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
        locked.ahead.hint.prefetch::<(K, V)>(hash);
        Probe { hash, locked }
    }

    /// Inserts a key known to be absent.
    pub(crate) fn insert(&self, located: &mut Located<'_, K, V>, key: K, value: V) {
        let hasher = &self.hasher;
        let table = &mut located.shard.table;
        table.insert(located.hash, (key, value), &|(k, _)| hasher.hash_one(k));
        located.hint.update(table);
    }

    /// Tries denials without the lock in every shard from now on, as
    /// contention would: lets tests check that path on one thread.
    #[cfg(test)]
    pub(crate) fn peek_first_everywhere(&self) {
        for locked in self.shards.iter() {
            locked.ahead.peek_first.store(true, Ordering::Relaxed);
        }
    }

    /// Number of shards.
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Locks shard `index` (modulo the shard count).
    pub(crate) fn lock_shard(&self, index: usize) -> WriteGuard<'_, Shard<K, V>> {
        self.shards[index % self.shards.len()].shard.write()
    }
}

/// 32 shards per CPU, so two threads rarely meet on one lock. A thread
/// that finds its shard held spins and then yields its time slice, which
/// costs microseconds: with 8 shards on 2 CPUs (four per CPU), one check in
/// eight met the other thread's shard, and the yields made the two-thread
/// checks cost as much as governor's (see `docs/PERFORMANCE.md`). A shard
/// costs a few hundred bytes, and its table's smallest size (about 400
/// bytes) once it holds a key: nothing per key at large key counts, and at
/// most [`MAX_DEFAULT_SHARDS`] of them, so a limiter of a few keys on a
/// large machine stays small.
pub(crate) fn default_shards() -> usize {
    let cpus = std::thread::available_parallelism().map_or(4, |n| n.get());
    (cpus * 32).next_power_of_two().min(MAX_DEFAULT_SHARDS)
}

/// The most shards [`default_shards`] gives (32 CPUs' worth).
const MAX_DEFAULT_SHARDS: usize = 1024;

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

    /// `shards` shards (at least one) whose tables are allocated for `keys`
    /// keys between them, with 2% spare for keys spreading unevenly.
    pub(crate) fn for_keys(keys: usize, shards: usize) -> Self {
        let shards = shards.clamp(1, MAX_SHARDS);
        let per_shard = keys.div_ceil(shards);
        Sizing {
            shards,
            per_shard: per_shard.saturating_add(per_shard / 49),
        }
    }
}

impl<K: Hash, V> Shard<K, V> {
    /// Removes the entry in full bucket `index` (the entries after it may
    /// move back).
    pub(crate) fn remove(&mut self, index: usize) -> (K, V) {
        self.let_readers_go();
        self.take(index)
    }

    /// Waits for the reads without the lock in progress, if a removed key
    /// frees memory they may be comparing: the caller holds the lock, so
    /// every read that may see the key ends first (`readers::wait`), and
    /// later ones find the lock held. Keys without drop glue free nothing
    /// such a read sees: their removals never wait.
    fn let_readers_go(&self) {
        if self.frees_what_readers_see {
            readers::wait();
        }
    }

    /// Takes the entry in full bucket `index` out of the table.
    fn take(&mut self, index: usize) -> (K, V) {
        let hasher = &self.hasher;
        self.table.remove(index, &|(k, _)| hasher.hash_one(k))
    }

    /// Looks at the next `budget` buckets from the sweep cursor and removes
    /// the entries `expired` says are done with, stopping early once it
    /// removed `max_removed`. Returns how many it removed.
    /// A removal moves the next entries back, into the bucket just looked
    /// at: that bucket is looked at again, so one pass of as many buckets as
    /// the table has sees every entry.
    pub(crate) fn sweep(
        &mut self,
        budget: usize,
        max_removed: usize,
        mut expired: impl FnMut(&V) -> bool,
    ) -> usize {
        let buckets = self.table.buckets();
        if self.table.is_empty() {
            return 0;
        }
        let mut removed = 0;
        let mut looked = 0;
        while looked < budget.min(buckets) && removed < max_removed {
            let index = self.cursor % buckets;
            if self.table.get(index).is_some_and(|(_, v)| expired(v)) {
                // One wait, before the first removal, serves the whole
                // sweep: the lock is held throughout.
                if removed == 0 {
                    self.let_readers_go();
                }
                self.take(index);
                removed += 1;
                continue;
            }
            self.cursor = (index + 1) % buckets;
            looked += 1;
        }
        removed
    }

    /// Buckets in this shard's table (occupied or not).
    pub(crate) fn buckets(&self) -> usize {
        self.table.buckets()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether locking `key` on a thread of its own finds the shard
    /// contended.
    fn contended_from_another_thread(map: &ShardedMap<u64, u64>, key: u64) -> bool {
        std::thread::scope(|s| s.spawn(|| map.locate(&key).contended).join().unwrap())
    }

    #[test]
    fn turns_on_different_keys_count_as_contention_only_in_a_map_that_fits_in_cache() {
        let map: ShardedMap<u64, u64> = ShardedMap::new(Sizing::growing(1));
        for key in 0..10 {
            let mut located = map.locate(&key);
            map.insert(&mut located, key, key);
        }
        assert!(!map.locate(&1).contended, "the same thread again");
        assert!(contended_from_another_thread(&map, 2), "small: any key");
        // More entries than 1 MiB holds, in the one shard.
        let large = (CACHED_BYTES / std::mem::size_of::<(u64, u64)>()) as u64 + 1;
        for key in 10..large {
            let mut located = map.locate(&key);
            map.insert(&mut located, key, key);
        }
        // The lock last changed hands for key 10 (this thread's first
        // insert after the other thread's turn); another key is one whose
        // hash differs in the bits a turn keeps.
        let tag = |key: u64| map.hasher.hash_one(key) & !TURN_TOKEN;
        let other = (11..).find(|&key| tag(key) != tag(10)).unwrap();
        assert!(!map.locate(&1).contended);
        assert!(
            !contended_from_another_thread(&map, other),
            "large: another key"
        );
        assert!(
            map.locate(&other).contended,
            "large: the same key, another thread"
        );
        assert!(!map.locate(&other).contended, "the same thread again");
    }

    #[test]
    fn a_million_keys_grown_on_demand_fill_tables_to_over_three_quarters() {
        let map: ShardedMap<u64, ()> = ShardedMap::new(Sizing::growing(8));
        for key in 0..1_000_000u64 {
            let mut located = map.locate(&key);
            map.insert(&mut located, key, ());
        }
        let buckets: usize = (0..8).map(|i| map.lock_shard(i).buckets()).sum();
        let fill = 1e6 / buckets as f64;
        assert!(fill > 0.78, "{fill}");
    }

    #[test]
    fn sweeping_one_pass_sees_every_key() {
        let map: ShardedMap<u64, u64> = ShardedMap::new(Sizing::growing(1));
        for key in 0..10_000u64 {
            let mut located = map.locate(&key);
            map.insert(&mut located, key, key % 3);
        }
        let mut shard = map.lock_shard(0);
        let buckets = shard.buckets();
        // Removing moves keys back into buckets already looked at.
        assert_eq!(shard.sweep(buckets, usize::MAX, |v| *v != 0), 6_666);
        assert_eq!(shard.table.len(), 3_334);
    }

    #[test]
    fn lock_free_reads_see_stored_values_while_tables_grow_and_keys_go() {
        lock_free_reads_while_tables_grow_and_keys_go(|n| n);
        // Keys that own memory, freed as they go while read.
        lock_free_reads_while_tables_grow_and_keys_go(|n| format!("key-{n}"));
        // A key type of the user's own that owns memory is never read
        // without the lock.
        #[derive(Hash, PartialEq, Eq)]
        struct Named(String);
        let map: ShardedMap<Named, u64> = ShardedMap::new(Sizing::growing(1));
        let key = Named("key".into());
        let mut located = map.locate(&key);
        map.insert(&mut located, Named("key".into()), 1);
        drop(located);
        let probe = map.probe(&key);
        assert_eq!(probe.peek(&key).or_else(|| probe.peek(&key)), None);
    }

    /// Two threads reading `name(n)`'s values without the lock while the
    /// test's thread churns the map.
    fn lock_free_reads_while_tables_grow_and_keys_go<K>(name: impl Fn(u64) -> K + Sync)
    where
        K: Hash + Eq + Send + Sync,
    {
        // Two shards whose tables keep growing and losing keys (removed
        // one by one and by the sweep), read without the lock by two
        // threads: a read finds a key's own value or nothing, never
        // another's, and never touches freed memory (a torn or stale read
        // would show as a wrong value, or a crash; under Miri or a
        // sanitizer, as a use after free).
        let value_of = |key: u64| key.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        for round in 0..8u64 {
            let map: ShardedMap<K, u64> = ShardedMap::new(Sizing::growing(2));
            for pass in 0..3u64 {
                let stop = AtomicBool::new(false);
                std::thread::scope(|s| {
                    for thread in 0..2u64 {
                        let (map, stop, name) = (&map, &stop, &name);
                        s.spawn(move || {
                            let mut n = thread;
                            while !stop.load(Ordering::Relaxed) {
                                n = (n + 7) % 20_000;
                                let key = name(n);
                                if let Some(value) = map.probe(&key).peek(&key) {
                                    assert_eq!(value, value_of(n), "{n}");
                                }
                            }
                        });
                    }
                    // Stops the readers even if an assertion below fails.
                    struct Stop<'a>(&'a AtomicBool);
                    impl Drop for Stop<'_> {
                        fn drop(&mut self) {
                            self.0.store(true, Ordering::Relaxed);
                        }
                    }
                    let _stop = Stop(&stop);
                    for n in 0..20_000u64 {
                        let key = name(n);
                        let mut located = map.locate(&key);
                        if located.get_mut(&key).is_none() {
                            map.insert(&mut located, name(n), value_of(n));
                        }
                        drop(located);
                        // A read right after each insert, which may have
                        // grown the table (twice, now and then).
                        let read = map.probe(&key).peek(&key);
                        assert!(read.is_none() || read == Some(value_of(n)));
                    }
                    for n in ((round + pass) % 3..20_000u64).step_by(3) {
                        let key = name(n);
                        map.locate(&key).remove(&key);
                    }
                    for shard in 0..map.shard_count() {
                        let mut shard = map.lock_shard(shard);
                        let buckets = shard.buckets();
                        shard.sweep(buckets, usize::MAX, |v| v % 5 == 1);
                    }
                });
                // Read alone, every stored key is found (one read in
                // `readers::LOCKED_EVERY` on a thread is sent to the lock
                // on purpose: a second read is not).
                for n in 0..20_000u64 {
                    let key = name(n);
                    let stored = map.locate(&key).get_mut(&key).copied();
                    let probe = map.probe(&key);
                    let read = probe.peek(&key).or_else(|| probe.peek(&key));
                    assert_eq!(read, stored);
                }
            }
        }
    }

    #[test]
    fn only_maps_read_without_the_lock_wait_for_readers_when_keys_go() {
        let map: ShardedMap<String, u64> = ShardedMap::new(Sizing::growing(1));
        assert!(map.probe("key").reads_lock_free());
        assert!(map.lock_shard(0).frees_what_readers_see);
        let map: ShardedMap<String, u64> = ShardedMap::locked_only(Sizing::growing(1));
        assert!(!map.probe("key").reads_lock_free());
        assert!(!map.lock_shard(0).frees_what_readers_see);
    }

    #[test]
    fn the_slot_hint_always_describes_the_current_table() {
        // Lock-free reads probe the table the hint describes: it must be
        // the current one after every insert, even when one insert grew the
        // table twice and the newest table's control bytes were allocated
        // where an older table's had been (session 9's crash).
        for round in 0..200u64 {
            let map: ShardedMap<u64, u64> = ShardedMap::new(Sizing::growing(4));
            for key in 0..2_000u64 {
                let key = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ round;
                let mut located = map.locate(&key);
                if located.get_mut(&key).is_none() {
                    map.insert(&mut located, key, key);
                }
                let table = &located.shard.table;
                let hint = located.hint;
                let (tags, slots) = table.addresses();
                assert_eq!(hint.tags.load(Ordering::Relaxed), tags, "round {round}");
                assert_eq!(hint.slots.load(Ordering::Relaxed), slots, "round {round}");
                assert_eq!(
                    hint.homes.load(Ordering::Relaxed),
                    table.homes(),
                    "round {round}"
                );
            }
        }
    }

    #[test]
    fn sizing_holds_the_keys_with_the_shards_asked_for() {
        for keys in [0, 1, 100, 12_345, 10_000_000] {
            for min in [1, 8, 64] {
                let sizing = Sizing::for_keys(keys, min);
                assert_eq!(sizing.shards, min, "{keys} {min}");
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
