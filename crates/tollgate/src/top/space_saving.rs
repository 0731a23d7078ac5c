//! One Space-Saving summary (Metwally, Agrawal and El Abbadi, "Efficient
//! computation of frequent and top-k elements in data streams", ICDT 2005),
//! weighted: at most `capacity` keys, each with an estimated count that
//! overestimates its true count by at most its own `error`, itself at most
//! the smallest count in a full summary, which is at most `N / capacity`
//! (`N` the weight recorded), because the counts always add up to `N`.
//!
//! The keys sit in a min-heap by count, so a hit on a tracked key is a hash
//! lookup and a sift (no allocation), and an untracked key takes the place
//! of the smallest.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Counts, Hit};

/// A tracked key.
pub(super) struct Slot {
    pub(super) key: Arc<str>,
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
    index: HashMap<Arc<str>, usize, foldhash::fast::RandomState>,
    /// Every hit recorded, tracked or not (exact).
    pub(super) totals: Counts,
}

impl Summary {
    pub(super) fn new(capacity: usize) -> Self {
        Summary {
            capacity,
            slots: Vec::new(),
            heap: Vec::new(),
            index: HashMap::default(),
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
        self.index.get(key).map(|&slot| &self.slots[slot])
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
        if let Some(&slot) = self.index.get(key) {
            let s = &mut self.slots[slot];
            s.count = s.count.saturating_add(hits);
            s.counts.add(hit, hits);
            let pos = s.heap_pos;
            self.sift_down(pos);
            return;
        }
        let key: Arc<str> = Arc::from(key);
        let mut counts = Counts::default();
        counts.add(hit, hits);
        if self.slots.len() < self.capacity {
            let slot = self.slots.len();
            self.index.insert(Arc::clone(&key), slot);
            self.slots.push(Slot {
                key,
                count: hits,
                error: 0,
                counts,
                heap_pos: self.heap.len(),
            });
            self.heap.push(slot);
            self.sift_up(self.heap.len() - 1);
            return;
        }
        // Full: the new key takes the smallest's place and inherits its
        // count as its possible overestimate.
        let slot = self.heap[0];
        let min = self.slots[slot].count;
        self.index.remove(&self.slots[slot].key);
        self.index.insert(Arc::clone(&key), slot);
        self.slots[slot] = Slot {
            key,
            count: min.saturating_add(hits),
            error: min,
            counts,
            heap_pos: 0,
        };
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
        let c = s
            .slots()
            .iter()
            .find(|x| &*x.key == "c")
            .expect("c tracked");
        assert_eq!((c.count, c.error, c.counts.refused), (3, 2, 1));
        assert!(s.slots().iter().all(|x| &*x.key != "b"));
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
}
