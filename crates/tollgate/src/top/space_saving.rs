//! One Space-Saving summary (Metwally, Agrawal and El Abbadi, "Efficient
//! computation of frequent and top-k elements in data streams", ICDT 2005),
//! weighted: at most `capacity` keys, each with an estimated count that
//! overestimates its true count by at most its own `error`, itself at most
//! the smallest count in a full summary, which is at most `N / capacity`
//! (`N` the weight recorded), because the counts always add up to `N`.
//!
//! The keys sit in the paper's own "stream summary": buckets of the keys of
//! equal count, in a list by count. The smallest count is the first
//! bucket's, so an untracked key takes the place of one of the smallest in
//! O(1), and a hit moves its key to the bucket of its new count: the next
//! one for a weight of 1, after a walk past the counts in between for a
//! larger weight (at most one bucket per distinct count held, so never
//! more than `capacity`). One hash of the key either way, and no allocation
//! once the summary is full and its index has grown to its bound (the new
//! key is copied into the evicted one's buffer, and emptied buckets are
//! reused).
//!
//! Among the keys of the smallest count, the one that has had it longest
//! goes first: a key just come in is not pushed out by the next new one
//! before it had a chance to be hit again.

use std::hash::{BuildHasher, Hasher};

use hashbrown::HashTable;

use super::{Counts, Hit};

/// The end of a list of buckets, or no bucket.
const NIL: u32 = u32::MAX;

/// The most keys a summary may keep: its slots and buckets are numbered
/// with 32 bits, which keeps the structures a hit walks small enough to
/// stay in the processor's nearest cache.
pub(super) const MAX_CAPACITY: usize = 1 << 24;

/// How many index entries per key kept the index may hold before it is
/// made anew: an evicted key's entry is left in place (lookups compare
/// keys, so it finds nothing), which spares a lookup per eviction; making
/// the index anew costs one insertion per key kept, once every
/// `(STALE_ENTRIES - 1) × capacity` evictions.
const STALE_ENTRIES: usize = 4;

/// A tracked key, one cache line: what a hit on it reads and writes.
#[repr(align(64))]
struct Slot {
    key: String,
    /// The key's hash, so that making the index anew hashes nothing.
    hash: u64,
    /// The count of the key it replaced: how much its count may overstate.
    error: u64,
    /// What was counted since the key came in (exact).
    counts: Counts,
}

/// Where a tracked key sits among the buckets, apart from its [`Slot`]:
/// the moves between buckets touch a key's neighbours, and with their
/// places packed together those stay in cache, where whole slots (a key's
/// bytes and numbers) did not.
#[derive(Clone, Copy)]
struct Link {
    /// The bucket of its count.
    bucket: u32,
    /// Its neighbours in that bucket, whose keys form a ring in the order
    /// they joined it.
    prev: u32,
    next: u32,
}

/// The keys of one count.
struct Bucket {
    /// The estimate of each of its keys: its `error` plus everything
    /// counted since it came in.
    count: u64,
    /// The key that has been in the bucket longest.
    first: u32,
    /// The buckets of the next smaller and the next larger count; a free
    /// bucket's `next` is the next free one.
    prev: u32,
    next: u32,
}

/// A tracked key's numbers.
pub(super) struct Tracked<'a> {
    pub(super) key: &'a str,
    /// The estimate: `error` plus everything counted since the key came in.
    pub(super) count: u64,
    /// How much `count` may overstate.
    pub(super) error: u64,
    /// What was counted since the key came in (exact).
    pub(super) counts: Counts,
}

/// A Space-Saving summary of one sub-window.
pub(super) struct Summary {
    capacity: usize,
    /// Slot `i`'s key, its numbers, and its place among the buckets.
    slots: Vec<Slot>,
    links: Vec<Link>,
    buckets: Vec<Bucket>,
    /// The bucket of the smallest count (`NIL` while empty).
    smallest: u32,
    /// The first bucket emptied for reuse (`NIL`: none).
    free: u32,
    /// Slot numbers, by their key's hash, and by the hash of keys the
    /// slot held before (see [`STALE_ENTRIES`]).
    index: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
    /// Every hit recorded, tracked or not (exact).
    pub(super) totals: Counts,
}

impl Summary {
    /// A summary of at most `capacity` keys (at most [`MAX_CAPACITY`]:
    /// more is kept to that).
    pub(super) fn new(capacity: usize) -> Self {
        Summary {
            capacity: capacity.min(MAX_CAPACITY),
            slots: Vec::new(),
            links: Vec::new(),
            buckets: Vec::new(),
            smallest: NIL,
            free: NIL,
            index: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
            totals: Counts::default(),
        }
    }

    /// Empties the summary, keeping its memory for the next sub-window.
    pub(super) fn clear(&mut self) {
        self.slots.clear();
        self.links.clear();
        self.buckets.clear();
        self.smallest = NIL;
        self.free = NIL;
        self.index.clear();
        self.totals = Counts::default();
    }

    /// How many keys are tracked.
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn get(&self, key: &str) -> Option<Tracked<'_>> {
        self.find(self.hash(key), key)
            .map(|slot| self.tracked_at(slot))
    }

    /// Every tracked key.
    pub(super) fn tracked(&self) -> impl Iterator<Item = Tracked<'_>> {
        (0..self.slots.len() as u32).map(|slot| self.tracked_at(slot))
    }

    fn tracked_at(&self, slot: u32) -> Tracked<'_> {
        let s = &self.slots[slot as usize];
        Tracked {
            key: &s.key,
            count: self.bucket(self.link(slot).bucket).count,
            error: s.error,
            counts: s.counts,
        }
    }

    /// The key's bytes alone, hashed: a `str`'s `Hash` adds a terminator
    /// that costs a round of mixing, which keys of a single type do not need.
    fn hash(&self, key: &str) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        hasher.write(key.as_bytes());
        hasher.finish()
    }

    fn find(&self, hash: u64, key: &str) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(hash, |&s| slots[s as usize].key == key)
            .copied()
    }

    fn link(&self, slot: u32) -> &Link {
        &self.links[slot as usize]
    }

    fn link_mut(&mut self, slot: u32) -> &mut Link {
        &mut self.links[slot as usize]
    }

    fn bucket(&self, bucket: u32) -> &Bucket {
        &self.buckets[bucket as usize]
    }

    fn bucket_mut(&mut self, bucket: u32) -> &mut Bucket {
        &mut self.buckets[bucket as usize]
    }

    /// The most any untracked key's true count can be: the smallest count
    /// once the summary is full (a key evicted had at most that), 0 before
    /// (every key seen is tracked).
    pub(super) fn untracked_bound(&self) -> u64 {
        if self.slots.len() < self.capacity || self.smallest == NIL {
            0
        } else {
            self.bucket(self.smallest).count
        }
    }

    #[inline]
    pub(super) fn record(&mut self, key: &str, hit: Hit, hits: u64) {
        self.totals.add(hit, hits);
        let hash = self.hash(key);
        let slot = match self.find(hash, key) {
            Some(slot) => slot,
            None => self.take_in(key, hash),
        };
        self.slots[slot as usize].counts.add(hit, hits);
        self.raise(slot, hits);
    }

    /// The slot for `key`, a key not tracked: a new one, or, once the
    /// summary is full, that of the key that has had the smallest count
    /// longest, `key` inheriting that count as its possible overestimate.
    #[inline]
    fn take_in(&mut self, key: &str, hash: u64) -> u32 {
        let slot = if self.slots.len() < self.capacity {
            self.track(key, hash)
        } else {
            let bucket = self.bucket(self.smallest);
            let (slot, count) = (bucket.first, bucket.count);
            let s = &mut self.slots[slot as usize];
            s.key.clear();
            s.key.push_str(key);
            s.hash = hash;
            s.error = count;
            s.counts = Counts::default();
            slot
        };
        if self.index.len() >= self.capacity.saturating_mul(STALE_ENTRIES) {
            self.reindex();
        } else {
            let slots = &self.slots;
            self.index
                .insert_unique(hash, slot, |&s| slots[s as usize].hash);
        }
        slot
    }

    /// The index anew, without the entries of keys since evicted.
    fn reindex(&mut self) {
        let slots = &self.slots;
        self.index.clear();
        for (slot, s) in (0..).zip(slots) {
            self.index
                .insert_unique(s.hash, slot, |&s| slots[s as usize].hash);
        }
    }

    /// A new slot for `key`, at a count of 0.
    fn track(&mut self, key: &str, hash: u64) -> u32 {
        // Below `MAX_CAPACITY`, so below `NIL`.
        let slot = self.slots.len() as u32;
        self.slots.push(Slot {
            key: key.to_string(),
            hash,
            error: 0,
            counts: Counts::default(),
        });
        self.links.push(Link {
            bucket: NIL,
            prev: slot,
            next: slot,
        });
        let zero = match self.smallest {
            NIL => NIL,
            smallest if self.bucket(smallest).count == 0 => smallest,
            _ => NIL,
        };
        let bucket = if zero == NIL {
            let bucket = self.new_bucket(0);
            self.link_after(bucket, NIL);
            bucket
        } else {
            zero
        };
        self.join(slot, bucket);
        slot
    }

    /// Adds `by` to the count of `slot`'s key: it moves to the bucket of
    /// its new count, made if there is none, or takes its bucket along when
    /// it is alone there.
    #[inline]
    fn raise(&mut self, slot: u32, by: u64) {
        let from = self.link(slot).bucket;
        let count = self.bucket(from).count.saturating_add(by);
        if count == self.bucket(from).count {
            return;
        }
        // The last bucket below the new count, and the one after it.
        let (mut below, mut above) = (from, self.bucket(from).next);
        while above != NIL && self.bucket(above).count < count {
            below = above;
            above = self.bucket(above).next;
        }
        if above != NIL && self.bucket(above).count == count {
            self.leave(slot);
            self.join(slot, above);
        } else if self.link(slot).next == slot {
            if below != from {
                self.unlink(from);
                self.link_after(from, below);
            }
            self.bucket_mut(from).count = count;
        } else {
            self.leave(slot);
            let bucket = self.new_bucket(count);
            self.link_after(bucket, below);
            self.join(slot, bucket);
        }
    }

    /// Puts `slot` last in `bucket`'s ring.
    #[inline(always)]
    fn join(&mut self, slot: u32, bucket: u32) {
        self.link_mut(slot).bucket = bucket;
        let first = self.bucket(bucket).first;
        if first == NIL {
            let link = self.link_mut(slot);
            (link.prev, link.next) = (slot, slot);
            self.bucket_mut(bucket).first = slot;
            return;
        }
        let last = self.link(first).prev;
        let link = self.link_mut(slot);
        (link.prev, link.next) = (last, first);
        self.link_mut(last).next = slot;
        self.link_mut(first).prev = slot;
    }

    /// Takes `slot` out of its bucket's ring, freeing the bucket if that
    /// empties it.
    #[inline(always)]
    fn leave(&mut self, slot: u32) {
        let Link { bucket, prev, next } = *self.link(slot);
        if next == slot {
            self.unlink(bucket);
            self.bucket_mut(bucket).next = self.free;
            self.free = bucket;
            return;
        }
        self.link_mut(prev).next = next;
        self.link_mut(next).prev = prev;
        if self.bucket(bucket).first == slot {
            self.bucket_mut(bucket).first = next;
        }
    }

    /// An empty bucket of `count`, in no list yet.
    fn new_bucket(&mut self, count: u64) -> u32 {
        let bucket = Bucket {
            count,
            first: NIL,
            prev: NIL,
            next: NIL,
        };
        if self.free == NIL {
            // At most one bucket per key kept, so below `NIL`.
            self.buckets.push(bucket);
            return self.buckets.len() as u32 - 1;
        }
        let reused = self.free;
        self.free = self.bucket(reused).next;
        *self.bucket_mut(reused) = bucket;
        reused
    }

    /// Puts `bucket` in the list right after `below` (first for `NIL`).
    fn link_after(&mut self, bucket: u32, below: u32) {
        let above = match below {
            NIL => self.smallest,
            below => self.bucket(below).next,
        };
        let b = self.bucket_mut(bucket);
        (b.prev, b.next) = (below, above);
        if above != NIL {
            self.bucket_mut(above).prev = bucket;
        }
        match below {
            NIL => self.smallest = bucket,
            below => self.bucket_mut(below).next = bucket,
        }
    }

    /// Takes `bucket` out of the list.
    fn unlink(&mut self, bucket: u32) {
        let Bucket { prev, next, .. } = *self.bucket(bucket);
        match prev {
            NIL => self.smallest = next,
            prev => self.bucket_mut(prev).next = next,
        }
        if next != NIL {
            self.bucket_mut(next).prev = prev;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Summary {
        /// The stream summary's shape: buckets in strictly rising count
        /// order, each a ring of the keys pointing back at it, every key in
        /// exactly one, and the index finding every key.
        fn assert_shape(&self) {
            let mut seen = 0;
            let (mut bucket, mut below, mut last) = (self.smallest, NIL, None);
            while bucket != NIL {
                let b = self.bucket(bucket);
                assert_eq!(b.prev, below);
                assert!(last < Some(b.count), "counts rise along the list");
                let mut slot = b.first;
                loop {
                    assert_eq!(self.link(slot).bucket, bucket);
                    assert_eq!(self.link(self.link(slot).next).prev, slot);
                    seen += 1;
                    slot = self.link(slot).next;
                    if slot == b.first {
                        break;
                    }
                }
                (below, last, bucket) = (bucket, Some(b.count), b.next);
            }
            assert_eq!(seen, self.slots.len());
            assert_eq!(self.links.len(), self.slots.len());
            for s in &self.slots {
                assert!(self.get(&s.key).is_some());
            }
        }
    }

    #[test]
    fn a_new_key_replaces_the_smallest_and_inherits_its_count_as_error() {
        let mut s = Summary::new(2);
        s.record("a", Hit::Admitted, 5);
        s.record("b", Hit::Admitted, 2);
        s.record("c", Hit::Refused, 1);
        let c = s.tracked().find(|x| x.key == "c").expect("c tracked");
        assert_eq!((c.count, c.error, c.counts.refused), (3, 2, 1));
        assert!(s.tracked().all(|x| x.key != "b"));
        assert!(s.get("b").is_none());
        assert_eq!(s.get("a").map(|x| x.count), Some(5));
        assert_eq!(s.untracked_bound(), 3);
        assert_eq!(s.totals.total(), 8);
        s.assert_shape();
    }

    #[test]
    fn of_the_smallest_the_one_held_longest_goes_first() {
        let mut s = Summary::new(3);
        for key in ["a", "b", "c"] {
            s.record(key, Hit::Admitted, 1);
        }
        // All at 1: `a` has been there longest, then `b`.
        s.record("d", Hit::Admitted, 1);
        assert!(s.get("a").is_none());
        s.record("e", Hit::Admitted, 1);
        assert!(s.get("b").is_none());
        assert_eq!(s.get("d").map(|x| (x.count, x.error)), Some((2, 1)));
        s.assert_shape();
    }

    #[test]
    fn an_evicted_key_is_found_no_more_and_comes_back_afresh() {
        let mut s = Summary::new(2);
        // Enough churn to leave stale index entries and to remake the index.
        for i in 0..50 {
            s.record(&format!("k{i}"), Hit::Admitted, 1);
            s.assert_shape();
        }
        assert!(s.get("k0").is_none());
        s.record("k0", Hit::Refused, 1);
        let k0 = s.get("k0").expect("tracked again");
        assert_eq!((k0.counts.refused, k0.count - k0.error), (1, 1));
        assert_eq!(s.tracked().filter(|x| x.key == "k0").count(), 1);
    }

    #[test]
    fn counts_always_add_up_to_the_weight_recorded() {
        let mut s = Summary::new(3);
        for i in 0..100u64 {
            s.record(&format!("k{}", i % 7), Hit::Admitted, i % 4 + 1);
        }
        let sum: u64 = s.tracked().map(|x| x.count).sum();
        assert_eq!(sum, s.totals.total());
        assert!(s.untracked_bound() <= s.totals.total() / 3);
        s.assert_shape();
    }

    #[test]
    fn a_hit_of_no_weight_changes_no_count() {
        let mut s = Summary::new(1);
        s.record("a", Hit::Admitted, 0);
        s.record("a", Hit::Admitted, 2);
        s.record("a", Hit::Admitted, 0);
        assert_eq!(s.get("a").map(|x| x.count), Some(2));
        s.record("b", Hit::Admitted, 0);
        assert_eq!(s.get("b").map(|x| (x.count, x.error)), Some((2, 2)));
        s.assert_shape();
    }

    #[test]
    fn clearing_forgets_every_key_and_reuses_the_memory() {
        let mut s = Summary::new(2);
        s.record("a", Hit::Admitted, 3);
        s.record("b", Hit::Admitted, 1);
        s.clear();
        assert_eq!((s.len(), s.totals.total(), s.untracked_bound()), (0, 0, 0));
        s.record("b", Hit::Refused, 1);
        assert_eq!(s.get("b").map(|x| (x.count, x.error)), Some((1, 0)));
        assert!(s.get("a").is_none());
        s.assert_shape();
    }

    proptest::proptest! {
        /// Space-Saving's guarantees, whatever the stream: counts add up
        /// to the weight, every tracked count overstates by at most its
        /// error, and an untracked key had at most the untracked bound.
        #[test]
        fn counts_bound_the_truth(
            capacity in 1usize..8,
            stream in proptest::collection::vec((0u8..20, 0u64..5), 0..200),
        ) {
            let mut s = Summary::new(capacity);
            let mut truth = std::collections::HashMap::new();
            for (key, hits) in &stream {
                let key = format!("k{key}");
                s.record(&key, Hit::Admitted, *hits);
                *truth.entry(key).or_insert(0u64) += hits;
            }
            let sum: u64 = s.tracked().map(|x| x.count).sum();
            proptest::prop_assert_eq!(sum, s.totals.total());
            for (key, &true_count) in &truth {
                match s.get(key) {
                    Some(slot) => {
                        proptest::prop_assert!(slot.count >= true_count);
                        proptest::prop_assert!(slot.count - slot.error <= true_count);
                    }
                    None => proptest::prop_assert!(true_count <= s.untracked_bound()),
                }
            }
        }

        /// The buckets stay a well-formed stream summary after any hits,
        /// with weights far apart (long walks) or equal (shared buckets),
        /// and the smallest count is the smallest key's.
        #[test]
        fn the_buckets_keep_their_shape(
            capacity in 1usize..10,
            stream in proptest::collection::vec((0u8..30, 0u64..40), 0..300),
        ) {
            let mut s = Summary::new(capacity);
            for (key, hits) in &stream {
                s.record(&format!("k{key}"), Hit::Admitted, *hits);
                s.assert_shape();
                proptest::prop_assert!(s.buckets.len() <= capacity);
                proptest::prop_assert!(s.index.len() <= capacity * STALE_ENTRIES);
            }
            let smallest = s.tracked().map(|x| x.count).min();
            if s.len() == capacity {
                proptest::prop_assert_eq!(smallest, Some(s.untracked_bound()));
            }
        }
    }
}
