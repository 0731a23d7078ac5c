//! One Space-Saving summary (Metwally, Agrawal and El Abbadi, "Efficient
//! computation of frequent and top-k elements in data streams", ICDT 2005),
//! weighted: at most `capacity` keys, each with an estimated count that
//! overestimates its true count by at most its own `error`, itself at most
//! the smallest count in a full summary, which is at most `N / capacity`
//! (`N` the weight recorded), because the counts always add up to `N`.
//!
//! The keys sit in a min-heap by count, so a hit on a tracked key is a hash
//! lookup and a sift, and an untracked key takes the place of the smallest:
//! one hash of the key either way, and no allocation once the summary is
//! full (the new key is copied into the evicted one's buffer).

use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::{Counts, Hit};

/// A tracked key.
pub(super) struct Slot {
    pub(super) key: String,
    /// The key's hash, so that evicting it hashes nothing.
    hash: u64,
    /// The estimate: `error` plus everything counted since the key came in.
    pub(super) count: u64,
    /// The count of the key it replaced: how much `count` may overstate.
    pub(super) error: u64,
    /// What was counted since the key came in (exact).
    pub(super) counts: Counts,
    heap_pos: usize,
}

/// A Space-Saving summary of one sub-window.
pub(super) struct Summary {
    capacity: usize,
    slots: Vec<Slot>,
    /// Slot indices, a min-heap by count.
    heap: Vec<usize>,
    /// Slot indices, by their key's hash.
    index: HashTable<usize>,
    hasher: foldhash::fast::RandomState,
    /// Every hit recorded, tracked or not (exact).
    pub(super) totals: Counts,
}

impl Summary {
    pub(super) fn new(capacity: usize) -> Self {
        Summary {
            capacity,
            slots: Vec::new(),
            heap: Vec::new(),
            index: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
            totals: Counts::default(),
        }
    }

    /// Empties the summary, keeping its memory for the next sub-window.
    pub(super) fn clear(&mut self) {
        self.slots.clear();
        self.heap.clear();
        self.index.clear();
        self.totals = Counts::default();
    }

    pub(super) fn get(&self, key: &str) -> Option<&Slot> {
        self.find(self.hasher.hash_one(key), key)
            .map(|slot| &self.slots[slot])
    }

    fn find(&self, hash: u64, key: &str) -> Option<usize> {
        let slots = &self.slots;
        self.index.find(hash, |&s| slots[s].key == key).copied()
    }

    pub(super) fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// The most any untracked key's true count can be: the smallest count
    /// once the summary is full (a key evicted had at most that), 0 before
    /// (every key seen is tracked).
    pub(super) fn untracked_bound(&self) -> u64 {
        if self.slots.len() < self.capacity {
            0
        } else {
            self.heap.first().map_or(0, |&s| self.slots[s].count)
        }
    }

    pub(super) fn record(&mut self, key: &str, hit: Hit, hits: u64) {
        self.totals.add(hit, hits);
        let hash = self.hasher.hash_one(key);
        if let Some(slot) = self.find(hash, key) {
            let s = &mut self.slots[slot];
            s.count = s.count.saturating_add(hits);
            s.counts.add(hit, hits);
            let pos = s.heap_pos;
            self.sift_down(pos);
            return;
        }
        let mut counts = Counts::default();
        counts.add(hit, hits);
        let Summary { slots, index, .. } = self;
        if slots.len() < self.capacity {
            let slot = slots.len();
            slots.push(Slot {
                key: key.to_string(),
                hash,
                count: hits,
                error: 0,
                counts,
                heap_pos: self.heap.len(),
            });
            index.insert_unique(hash, slot, |&s| slots[s].hash);
            self.heap.push(slot);
            self.sift_up(self.heap.len() - 1);
            return;
        }
        // Full: the new key takes the smallest's place and inherits its
        // count as its possible overestimate.
        let slot = self.heap[0];
        if let Ok(entry) = index.find_entry(slots[slot].hash, |&s| s == slot) {
            entry.remove();
        }
        let s = &mut slots[slot];
        s.key.clear();
        s.key.push_str(key);
        s.hash = hash;
        s.error = s.count;
        s.count = s.count.saturating_add(hits);
        s.counts = counts;
        index.insert_unique(hash, slot, |&s| slots[s].hash);
        self.sift_down(0);
    }

    fn count_at(&self, pos: usize) -> u64 {
        self.slots[self.heap[pos]].count
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.slots[self.heap[a]].heap_pos = a;
        self.slots[self.heap[b]].heap_pos = b;
    }

    fn sift_up(&mut self, mut pos: usize) {
        while pos > 0 {
            let parent = (pos - 1) / 2;
            if self.count_at(parent) <= self.count_at(pos) {
                break;
            }
            self.swap(parent, pos);
            pos = parent;
        }
    }

    fn sift_down(&mut self, mut pos: usize) {
        loop {
            let left = 2 * pos + 1;
            if left >= self.heap.len() {
                break;
            }
            let right = left + 1;
            let smaller = if right < self.heap.len() && self.count_at(right) < self.count_at(left) {
                right
            } else {
                left
            };
            if self.count_at(pos) <= self.count_at(smaller) {
                break;
            }
            self.swap(pos, smaller);
            pos = smaller;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_replaces_the_smallest_and_inherits_its_count_as_error() {
        let mut s = Summary::new(2);
        s.record("a", Hit::Admitted, 5);
        s.record("b", Hit::Admitted, 2);
        s.record("c", Hit::Refused, 1);
        let c = s.slots().iter().find(|x| x.key == "c").expect("c tracked");
        assert_eq!((c.count, c.error, c.counts.refused), (3, 2, 1));
        assert!(s.slots().iter().all(|x| x.key != "b"));
        assert!(s.get("b").is_none());
        assert_eq!(s.get("a").map(|x| x.count), Some(5));
        assert_eq!(s.untracked_bound(), 3);
        assert_eq!(s.totals.total(), 8);
    }

    #[test]
    fn counts_always_add_up_to_the_weight_recorded() {
        let mut s = Summary::new(3);
        for i in 0..100u64 {
            s.record(&format!("k{}", i % 7), Hit::Admitted, i % 4 + 1);
        }
        let sum: u64 = s.slots().iter().map(|x| x.count).sum();
        assert_eq!(sum, s.totals.total());
        assert!(s.untracked_bound() <= s.totals.total() / 3);
    }

    proptest::proptest! {
        /// Space-Saving's guarantees, whatever the stream: counts add up
        /// to the weight, every tracked count overstates by at most its
        /// error, and an untracked key had at most the untracked bound.
        #[test]
        fn counts_bound_the_truth(
            capacity in 1usize..8,
            stream in proptest::collection::vec((0u8..20, 1u64..5), 0..200),
        ) {
            let mut s = Summary::new(capacity);
            let mut truth = std::collections::HashMap::new();
            for (key, hits) in &stream {
                let key = format!("k{key}");
                s.record(&key, Hit::Admitted, *hits);
                *truth.entry(key).or_insert(0u64) += hits;
            }
            let sum: u64 = s.slots().iter().map(|x| x.count).sum();
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
    }
}
