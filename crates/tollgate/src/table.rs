//! An open-addressing hash table that grows by an eighth at a time.
//!
//! A table whose bucket count is a power of two doubles when it fills, so
//! at any key count it is between 44% and 88% full: a million keys of 24
//! bytes plus a control byte cost 29 to 57 bytes each, depending on where
//! the count falls. This table takes any bucket count (the home bucket of a
//! hash is `hash × homes >> 64`) and grows by 1/8 when 7/8 full, so it is
//! always 78–88% full (28.5–32 bytes a key at 25 bytes a slot). Each shard's
//! table also follows its own sequence of sizes (a phase in `[0, 1)` of one
//! growth step), so the shards of a map, which hold about the same number
//! of keys, do not all stand just past a growth at once: the map as a whole
//! averages about 82% full.
//!
//! Linear probing without wrap-around: a key sits at or after its home
//! bucket, with every bucket between them full; a short tail after the last
//! home bucket takes the overflow (a key that would run past it grows the
//! table). One control byte per bucket, 0 when empty, otherwise the high bit
//! and 7 bits of the hash, read eight at a time. Removal shifts the keys
//! after the hole back (no tombstones), which rehashes those keys: the
//! caller passes the hasher.

use std::mem::MaybeUninit;

use allocator_api2::vec::Vec as AllocVec;

use crate::huge::HugePages;

/// Control bytes read at once.
const GROUP: usize = 8;
/// Each control byte's high bit, across a group.
const HIGH: u64 = 0x8080_8080_8080_8080;
/// Each control byte's low bit, across a group.
const LOW: u64 = 0x0101_0101_0101_0101;
/// Home buckets at level 0 (phase 0).
const MIN_HOMES: f64 = 8.0;
/// Size of a table over the one before.
const GROWTH: f64 = 1.125;

/// Where a hash's probe starts among `homes` home buckets.
#[inline(always)]
pub(crate) fn home(hash: u64, homes: usize) -> usize {
    ((u128::from(hash) * homes as u128) >> 64) as usize
}

/// The control byte of a full bucket holding `hash`: not the bits `home`
/// takes (the high ones), so neighbours differ in it.
#[inline(always)]
fn tag(hash: u64) -> u8 {
    0x80 | (hash as u8 & 0x7f)
}

/// Home buckets at `level` for a table of `phase`.
fn homes_at(level: u32, phase: f64) -> usize {
    (MIN_HOMES * GROWTH.powf(f64::from(level) + phase)).round() as usize
}

/// Buckets after the last home bucket for the keys that run past it.
fn tail(homes: usize) -> usize {
    (homes / 4).clamp(GROUP, 256)
}

/// In a group of control bytes, the high bit of each byte equal to the
/// tag repeated in `wanted` (and, rarely, of a byte above one of them: the
/// key comparison settles those) before the group's first empty byte, and
/// the high bit of every empty byte.
#[inline(always)]
fn candidates(group: u64, wanted: u64) -> (u64, u64) {
    let empty = !group & HIGH;
    let same = group ^ wanted;
    let mut matches = same.wrapping_sub(LOW) & !same & HIGH;
    if empty != 0 {
        matches &= (empty & empty.wrapping_neg()) - 1;
    }
    (matches, empty)
}

/// A bit copy of the value `eq` picks among those of `hash`, in the table
/// whose control bytes, slots and home bucket count are `tags`, `slots` and
/// `homes`, read while writers may be changing it (see `Probe::peek`):
/// a candidate's bits are copied by a volatile read, and `eq` gets each
/// copy, which it must check is whole (no writer came) before taking it
/// for a `T`: a torn copy may not be a valid `T` at all. The probe stays
/// inside the table whatever it reads: the padding control bytes after the
/// last bucket are never written, so it stops there at the latest, as
/// [`Table::find_index`] does.
///
/// What is left that the language does not define: these reads race with
/// a writer's plain stores (the control bytes, the moved or inserted
/// entry) when one takes the lock meanwhile, the sequence lock's known
/// gap (crossbeam's `AtomicCell` fallback reads the same way). Nothing
/// read is used unless the version shows no writer came, the memory stays
/// allocated (see `crate::readers`), and `eq` sees only copies checked
/// whole, so no torn value is ever taken for a `T`; a fully defined
/// version would need every store to the table to be atomic.
///
/// # Safety
///
/// The three describe one table (as read together under one lock version)
/// whose memory stays allocated during the call. The copy returned is the
/// one `eq` accepted (so, once `eq` checked it is whole, a valid `T`);
/// `T`'s bits must be safe to duplicate for the time the copy is used.
#[inline(always)]
pub(crate) unsafe fn peek<T>(
    tags: usize,
    slots: usize,
    homes: usize,
    hash: u64,
    mut eq: impl FnMut(&MaybeUninit<T>) -> bool,
) -> Option<MaybeUninit<T>> {
    let wanted = u64::from(tag(hash)) * LOW;
    let mut index = home(hash, homes);
    loop {
        // SAFETY: as in `Table::group`: `index` is a bucket or the first
        // padding byte, with `GROUP` bytes after it. One unaligned load (a
        // volatile read of 8 bytes compiled to 8 loads and 14 shifts and
        // ors); whatever it reads, the probe stays in bounds (above).
        let group = u64::from_le(unsafe { ((tags + index) as *const u64).read_unaligned() });
        let (mut matches, empty) = candidates(group, wanted);
        while matches != 0 {
            let at = index + matches.trailing_zeros() as usize / 8;
            // SAFETY: `at` had a full control byte, so it is a bucket
            // (inside the slots); its bits are copied as they are.
            let copy = unsafe { std::ptr::read_volatile((slots as *const MaybeUninit<T>).add(at)) };
            if eq(&copy) {
                return Some(copy);
            }
            matches &= matches - 1;
        }
        if empty != 0 {
            return None;
        }
        index += GROUP;
    }
}

/// Values of type `T` found by a 64-bit hash that the caller computes.
pub(crate) struct Table<T> {
    /// One control byte per bucket, then `GROUP` empty ones so a group read
    /// at any bucket stays inside.
    tags: AllocVec<u8, HugePages>,
    /// The buckets; the ones whose control byte is not 0 are initialised.
    slots: AllocVec<MaybeUninit<T>, HugePages>,
    homes: usize,
    len: usize,
    level: u32,
    phase: f64,
}

impl<T> Table<T> {
    /// An empty table (no memory until the first value) whose sizes are
    /// `phase` (taken modulo 1) of a growth step along.
    pub(crate) fn new(phase: f64) -> Self {
        let mut tags = AllocVec::new_in(HugePages);
        tags.resize(GROUP, 0);
        Table {
            tags,
            slots: AllocVec::new_in(HugePages),
            homes: 0,
            len: 0,
            level: 0,
            phase: phase.rem_euclid(1.0),
        }
    }

    /// An empty table with room for `capacity` values before it grows (and
    /// little more: the size is cut to fit, not taken from the sequence).
    pub(crate) fn with_capacity(capacity: usize, phase: f64) -> Self {
        let mut table = Table::new(phase);
        if capacity == 0 {
            return table;
        }
        // The first size of the sequence that fits, which the next growth
        // goes on from; then the fewest home buckets that fit.
        let fits = |homes: usize| Self::room(homes + tail(homes)) >= capacity;
        let level = (0..)
            .find(|&level| fits(homes_at(level, table.phase)))
            .unwrap_or(0);
        let upper = homes_at(level, table.phase);
        let homes = (upper * 7 / 8..upper)
            .find(|&homes| fits(homes))
            .unwrap_or(upper);
        table = table.resized(homes, level, &|_| 0).unwrap_or(table);
        table
    }

    /// Values held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Buckets, full or not.
    pub(crate) fn buckets(&self) -> usize {
        self.slots.len()
    }

    /// Values the table holds before it grows.
    pub(crate) fn capacity(&self) -> usize {
        Self::room(self.buckets())
    }

    /// Values `buckets` buckets hold before growing: 7/8 of them.
    fn room(buckets: usize) -> usize {
        buckets / 8 * 7 + buckets % 8 * 7 / 8
    }

    /// Home buckets (for prefetching: see [`Table::addresses`]).
    pub(crate) fn homes(&self) -> usize {
        self.homes
    }

    /// Where the control bytes and the buckets start.
    pub(crate) fn addresses(&self) -> (usize, usize) {
        (self.tags.as_ptr() as usize, self.slots.as_ptr() as usize)
    }

    /// Bytes allocated.
    #[cfg(test)]
    pub(crate) fn allocation_size(&self) -> usize {
        self.tags.capacity() + self.slots.capacity() * std::mem::size_of::<T>()
    }

    /// The control bytes of buckets `index..index + GROUP`, the first in the
    /// lowest byte.
    #[inline(always)]
    fn group(&self, index: usize) -> u64 {
        debug_assert!(index + GROUP <= self.tags.len());
        // SAFETY: every probe starts at a bucket (`index < buckets`) or at
        // the first padding byte, and `tags` has `GROUP` bytes after the
        // last bucket.
        u64::from_le(unsafe { self.tags.as_ptr().add(index).cast::<u64>().read_unaligned() })
    }

    /// The bucket holding the value `eq` picks among those of `hash`.
    #[inline(always)]
    pub(crate) fn find_index(&self, hash: u64, mut eq: impl FnMut(&T) -> bool) -> Option<usize> {
        let wanted = u64::from(tag(hash)) * LOW;
        let mut index = home(hash, self.homes);
        loop {
            let (mut matches, empty) = candidates(self.group(index), wanted);
            while matches != 0 {
                let at = index + matches.trailing_zeros() as usize / 8;
                // SAFETY: `at` is before the group's first empty byte, so a
                // full bucket (padding bytes are empty).
                if eq(unsafe { self.slots.get_unchecked(at).assume_init_ref() }) {
                    return Some(at);
                }
                matches &= matches - 1;
            }
            if empty != 0 {
                return None;
            }
            index += GROUP;
        }
    }

    /// The value `eq` picks among those of `hash`.
    #[inline(always)]
    pub(crate) fn find(&self, hash: u64, eq: impl FnMut(&T) -> bool) -> Option<&T> {
        let index = self.find_index(hash, eq)?;
        // SAFETY: `find_index` returns full buckets.
        Some(unsafe { self.slots.get_unchecked(index).assume_init_ref() })
    }

    /// The value `eq` picks among those of `hash`, to change.
    #[inline(always)]
    pub(crate) fn find_mut(&mut self, hash: u64, eq: impl FnMut(&T) -> bool) -> Option<&mut T> {
        let index = self.find_index(hash, eq)?;
        // SAFETY: `find_index` returns full buckets.
        Some(unsafe { self.slots.get_unchecked_mut(index).assume_init_mut() })
    }

    /// The value in bucket `index`, if it is full.
    pub(crate) fn get(&self, index: usize) -> Option<&T> {
        // SAFETY: a bucket whose control byte is not 0 is initialised.
        (index < self.buckets() && self.tags[index] != 0)
            .then(|| unsafe { self.slots[index].assume_init_ref() })
    }

    /// The first empty bucket at or after `hash`'s home, if the table has
    /// one before its end.
    fn free_bucket(&self, hash: u64) -> Option<usize> {
        let mut index = home(hash, self.homes);
        loop {
            let empty = !self.group(index) & HIGH;
            if empty != 0 {
                let at = index + empty.trailing_zeros() as usize / 8;
                return (at < self.buckets()).then_some(at);
            }
            index += GROUP;
        }
    }

    /// Stores `value` (of `hash`, not in the table yet), growing the table
    /// if needed (`hasher` gives the hash of each value moved). Returns its
    /// bucket.
    pub(crate) fn insert(&mut self, hash: u64, value: T, hasher: &dyn Fn(&T) -> u64) -> usize {
        if self.len >= self.capacity() {
            self.grow(hasher);
        }
        loop {
            if let Some(at) = self.free_bucket(hash) {
                self.tags[at] = tag(hash);
                self.slots[at].write(value);
                self.len += 1;
                return at;
            }
            self.grow(hasher);
        }
    }

    /// Replaces the table with the next size that takes all its values.
    #[cold]
    fn grow(&mut self, hasher: &dyn Fn(&T) -> u64) {
        let mut level = if self.homes == 0 {
            self.level
        } else {
            self.level + 1
        };
        loop {
            // A failed attempt moved nothing out of `self`.
            if let Some(bigger) = self.resized(homes_at(level, self.phase), level, hasher) {
                let old = std::mem::replace(self, bigger);
                // Readers without the lock may still be probing the old
                // memory (see `crate::readers`).
                crate::readers::wait();
                old.forget_values();
                return;
            }
            level += 1;
        }
    }

    /// A copy of the table with `homes` home buckets (at `level` of its
    /// sizes), the values copied bit for bit (so exactly one of the two
    /// tables must then forget them), or `None` if it would have no room for
    /// one more value or some key would run past the end of it.
    fn resized(&self, homes: usize, level: u32, hasher: &dyn Fn(&T) -> u64) -> Option<Self> {
        let buckets = homes + tail(homes);
        if Self::room(buckets) <= self.len {
            return None;
        }
        let mut tags = AllocVec::with_capacity_in(buckets + GROUP, HugePages);
        tags.resize(buckets + GROUP, 0);
        let mut slots = AllocVec::with_capacity_in(buckets, HugePages);
        slots.resize_with(buckets, MaybeUninit::uninit);
        // Holds bit copies of `self`'s values: forgets them if this returns
        // early or the hasher (the caller's `Hash`) panics, so each value
        // keeps exactly one owner.
        let mut guard = Forget(Some(Table {
            tags,
            slots,
            homes,
            len: 0,
            level,
            phase: self.phase,
        }));
        let bigger = guard.0.as_mut()?;
        for index in 0..self.buckets() {
            let Some(value) = self.get(index) else {
                continue;
            };
            let hash = hasher(value);
            let at = bigger.free_bucket(hash)?;
            bigger.tags[at] = tag(hash);
            // SAFETY: bucket `index` is full; the copy is owned by one
            // table only, as the caller arranges.
            bigger.slots[at].write(unsafe { std::ptr::read(value) });
            bigger.len += 1;
        }
        guard.0.take()
    }

    /// Drops the table without dropping its values (another table owns
    /// their bits).
    fn forget_values(mut self) {
        self.tags.iter_mut().for_each(|tag| *tag = 0);
        self.len = 0;
    }

    /// Takes the value out of full bucket `index`, moving back the values
    /// after it that may then move (`hasher` gives their hashes).
    pub(crate) fn remove(&mut self, index: usize, hasher: &dyn Fn(&T) -> u64) -> T {
        assert!(self.tags[index] != 0, "removing an empty bucket");
        // SAFETY: the bucket is full; its control byte is cleared next, so
        // the value is read out once.
        let value = unsafe { self.slots[index].assume_init_read() };
        self.tags[index] = 0;
        self.len -= 1;
        let mut hole = index;
        let mut next = index + 1;
        while next < self.buckets() && self.tags[next] != 0 {
            // SAFETY: the bucket is full.
            let moved = unsafe { self.slots[next].assume_init_ref() };
            // A value whose home is at or before the hole would be cut off
            // from it by the hole: it moves into the hole.
            if home(hasher(moved), self.homes) <= hole {
                self.tags[hole] = self.tags[next];
                self.tags[next] = 0;
                // SAFETY: `hole` is empty and `next` full; the bits move
                // and `next` is marked empty, so the value has one owner.
                unsafe {
                    let bits = self.slots[next].assume_init_read();
                    self.slots[hole].write(bits);
                }
                hole = next;
            }
            next += 1;
        }
        value
    }
}

/// A table of bit copies, forgotten unless taken out.
struct Forget<T>(Option<Table<T>>);

impl<T> Drop for Forget<T> {
    fn drop(&mut self) {
        if let Some(table) = self.0.take() {
            table.forget_values();
        }
    }
}

impl<T> Drop for Table<T> {
    fn drop(&mut self) {
        if !std::mem::needs_drop::<T>() || self.len == 0 {
            return;
        }
        for index in 0..self.buckets() {
            if self.tags[index] != 0 {
                // SAFETY: a full bucket, dropped once (the table goes).
                unsafe { self.slots[index].assume_init_drop() };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    /// A hash with every bit mixed (keys are small integers in the tests).
    fn hash(key: u64) -> u64 {
        let mixed = (key ^ (key >> 31)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        mixed ^ (mixed >> 29)
    }

    fn hash_of(value: &(u64, String)) -> u64 {
        hash(value.0)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Inserts, lookups and removals agree with `HashMap` (values own
        /// memory, so a double drop or a leak shows under Miri/ASan and a
        /// lost value shows here).
        #[test]
        fn behaves_as_a_map(
            phase in 0.0f64..1.0,
            ops in prop::collection::vec((0u8..3, 0u64..300), 1..600),
        ) {
            let mut table: Table<(u64, String)> = Table::new(phase);
            let mut model = HashMap::new();
            for (op, key) in ops {
                let found = table.find_index(hash(key), |(k, _)| *k == key);
                prop_assert_eq!(found.is_some(), model.contains_key(&key));
                match (op, found) {
                    (0 | 1, None) => {
                        table.insert(hash(key), (key, key.to_string()), &hash_of);
                        model.insert(key, key.to_string());
                    }
                    (2, Some(at)) => {
                        let (k, v) = table.remove(at, &hash_of);
                        prop_assert_eq!(k, key);
                        prop_assert_eq!(Some(v), model.remove(&key));
                    }
                    _ => {}
                }
                prop_assert_eq!(table.len(), model.len());
                prop_assert!(table.len() <= table.capacity());
            }
            for (key, value) in &model {
                let found = table.find(hash(*key), |(k, _)| k == key);
                prop_assert_eq!(found.map(|(_, v)| v), Some(value));
            }
            let stored = (0..table.buckets()).filter_map(|i| table.get(i)).count();
            prop_assert_eq!(stored, model.len());
        }
    }

    #[test]
    fn a_hasher_panicking_during_growth_loses_and_doubles_nothing() {
        use std::sync::Arc;
        let shared = Arc::new(());
        let mut table: Table<(u64, Arc<()>)> = Table::new(0.0);
        let by_key = |v: &(u64, Arc<()>)| hash(v.0);
        let mut key = 0;
        while table.len() < table.capacity() || table.is_empty() {
            table.insert(hash(key), (key, Arc::clone(&shared)), &by_key);
            key += 1;
        }
        let held = table.len();
        let panicking = |_: &(u64, Arc<()>)| -> u64 { panic!("the caller's Hash panicked") };
        let grown = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            table.insert(hash(key), (key, Arc::clone(&shared)), &panicking);
        }));
        assert!(grown.is_err());
        // The value being inserted was dropped by the unwinding; the table
        // still holds its values once each.
        assert_eq!(table.len(), held);
        assert_eq!(Arc::strong_count(&shared), held + 1);
        for k in 0..key {
            assert!(table.find(hash(k), |v| v.0 == k).is_some());
        }
        drop(table);
        assert_eq!(Arc::strong_count(&shared), 1);
    }

    #[test]
    fn a_grown_table_stays_between_three_quarters_and_seven_eighths_full() {
        let mut table: Table<(u64, u64)> = Table::new(0.5);
        let by_key = |v: &(u64, u64)| hash(v.0);
        for key in 0..200_000u64 {
            table.insert(hash(key), (key, key), &by_key);
            if key > 10_000 {
                let fill = table.len() as f64 / table.buckets() as f64;
                assert!((0.75..=0.875).contains(&fill), "{key}: {fill}");
            }
        }
        for key in (0..200_000u64).step_by(101) {
            assert_eq!(table.find(hash(key), |v| v.0 == key), Some(&(key, key)));
        }
    }

    #[test]
    fn presized_tables_hold_their_capacity_without_growing() {
        for capacity in [1, 7, 100, 12_345] {
            let mut table: Table<(u64, ())> = Table::with_capacity(capacity, 0.25);
            let buckets = table.buckets();
            for key in 0..capacity as u64 {
                table.insert(hash(key), (key, ()), &|v| hash(v.0));
            }
            assert!(table.capacity() >= capacity);
            // A key running past the tail may grow it, rarely; never more.
            assert!(table.buckets() <= buckets * 5 / 4 + 16, "{capacity}");
        }
    }
}
