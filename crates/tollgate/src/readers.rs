//! Threads reading a shard without its lock, so that memory they may be
//! looking at is not freed under them.
//!
//! An optimistic read ([`crate::shard_lock::ShardLock::read_version`]) takes
//! no lock and writes no line another thread uses: two threads refused on
//! one hot key then keep their copies of its lines instead of passing them
//! back and forth on every check. The version check afterwards catches a
//! writer that changed what was read, but not one that freed it: a table
//! replaced by a larger one, or a removed key's own memory (a `String`'s
//! bytes, for the key types [`crate::owned_keys`] lists). So a reader
//! announces itself in a slot of its own thread (its own cache line) for
//! the time of the read, and a writer about to free such memory waits until
//! every slot that was announced before it took the lock is clear
//! ([`wait`]); readers that come later find the lock held and back off.
//! Writers pay this only when they free memory (a table's growth, a key's
//! removal or a sweep's), never on a check.

use std::cell::Cell;
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};

use crate::shard_lock::Backoff;

/// Threads that may read optimistically at once; a thread beyond them
/// takes the locked path.
const SLOTS: usize = 128;

/// One thread's announcement, alone on its cache lines (128 bytes: the
/// adjacent-line prefetcher pairs 64-byte lines).
#[repr(align(128))]
struct Slot {
    /// Reads in progress on this slot's thread (more than one only if a
    /// key's `Eq` itself reads a limiter).
    active: AtomicUsize,
    /// Whether a live thread owns the slot.
    claimed: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)] // each array element is its own slot
const FREE: Slot = Slot {
    active: AtomicUsize::new(0),
    claimed: AtomicBool::new(false),
};

static TABLE: [Slot; SLOTS] = [FREE; SLOTS];

/// A thread's reads without the lock are refused one time in this many, so
/// that its caller takes the lock now and then and sees whether the
/// contention that sent it here is still there (a read writes nothing, so
/// it cannot tell; alone on a key, the locked path is the cheaper one).
/// Seldom, because each such turn costs more than its own lock: it bumps
/// the shard's version, which fails the reads other threads have in flight
/// and sends them to the lock too. One in 64 cost threads refused on one
/// hot key half their time (118 against 64–97 ns a check, two threads,
/// `governor-vs-tollgate`); a thread left alone pays the lock-free path's
/// few extra instructions for at most this many reads.
pub(crate) const LOCKED_EVERY: u32 = 1024;

/// After a turn on the lock that found this thread alone (the shard goes
/// back to the locked path: see [`alone`]), the next comes this soon. A
/// thread that takes over keys another one used, and then checks them
/// alone, finds every shard it was first refused in "contended" (the lock
/// changed hands); each shard goes back to the locked path only at such a
/// turn, and turns land only in shards still read without the lock. At one
/// in [`LOCKED_EVERY`] reads, a single thread refused over 1,000 keys (64
/// shards) read half of 100,000 checks without the lock, each dearer alone
/// than the locked path (245 against 196 instructions, `u64`); at one in
/// 16, about a thousand. Nobody else reads such a shard, so its version's
/// bump fails no one's read.
const ALONE_EVERY: u32 = 16;

/// One past the highest slot ever claimed: [`wait`] looks at no more.
static USED: AtomicUsize = AtomicUsize::new(0);

/// The slot a thread claimed, given back when the thread ends, and the
/// reads left before its next turn on the lock (see [`enter`]).
struct Claim(Cell<Option<usize>>, Cell<u32>);

impl Claim {
    /// The thread's slot, claimed on first use; `None` if all are taken,
    /// and when its turn on the lock comes (one call in [`LOCKED_EVERY`],
    /// or in [`ALONE_EVERY`] after [`alone`]).
    fn index(&self) -> Option<usize> {
        let left = self.1.get();
        if left == 0 {
            self.1.set(LOCKED_EVERY);
            return None;
        }
        self.1.set(left - 1);
        if let Some(index) = self.0.get() {
            return Some(index);
        }
        let index = (0..SLOTS).find(|&index| {
            TABLE[index]
                .claimed
                .compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        })?;
        // Sequentially consistent, as the announcement after it: a writer
        // whose fence comes after this thread's first announcement then
        // sees the slot within `USED` (see [`enter`]). Once per thread.
        USED.fetch_max(index + 1, Ordering::SeqCst);
        self.0.set(Some(index));
        Some(index)
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(index) = self.0.get() {
            TABLE[index].claimed.store(false, Ordering::Release);
        }
    }
}

thread_local! {
    static CLAIM: Claim = const { Claim(Cell::new(None), Cell::new(LOCKED_EVERY)) };
}

/// An optimistic read in progress on this thread: until it drops, no
/// writer frees memory the read may look at.
pub(crate) struct Reading {
    slot: &'static Slot,
}

/// Announces a read; `None` if this thread has no slot (all taken, or the
/// thread is ending), and when its turn on the lock comes (one read in
/// [`LOCKED_EVERY`], or in [`ALONE_EVERY`] after [`alone`]): the caller
/// must then take the lock instead.
///
/// The announcement is a sequentially consistent read-modify-write of the
/// thread's own slot, and the caller then loads the lock word sequentially
/// consistently too ([`crate::shard_lock::ShardLock::read_version`]); a
/// writer's [`wait`] puts a sequentially consistent fence between taking
/// the lock and loading the slots: either the reader sees the lock taken,
/// or the writer sees the reader announced. (A locked add on a line no
/// other thread writes costs less than the `mfence` a fence would be.)
#[inline]
pub(crate) fn enter() -> Option<Reading> {
    let index = CLAIM.try_with(Claim::index).ok()??;
    let slot = &TABLE[index];
    slot.active.fetch_add(1, Ordering::SeqCst);
    Some(Reading { slot })
}

/// Tells that this thread's turn on the lock found it alone: its next turn
/// comes after [`ALONE_EVERY`] reads.
#[cold]
pub(crate) fn alone() {
    let _ = CLAIM.try_with(|claim| claim.1.set(ALONE_EVERY));
}

impl Drop for Reading {
    #[inline]
    fn drop(&mut self) {
        // Release: everything read happens before a writer sees the slot
        // clear and frees it.
        let active = self.slot.active.load(Ordering::Relaxed);
        self.slot.active.store(active - 1, Ordering::Release);
    }
}

/// Waits until no read announced before now is in progress. Called by a
/// writer holding a shard's lock, before it frees memory of that shard:
/// reads announced later find the lock held and touch nothing.
#[cold]
#[inline(never)]
pub(crate) fn wait() {
    fence(Ordering::SeqCst);
    for slot in &TABLE[..USED.load(Ordering::SeqCst)] {
        // A reader never waits for anything while announced, so it is gone
        // within nanoseconds unless its thread was descheduled.
        let mut backoff = Backoff::default();
        while slot.active.load(Ordering::Acquire) != 0 {
            backoff.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_its_slot_and_gives_it_back_when_it_ends() {
        std::thread::spawn(|| {
            let reading = enter().expect("a free slot");
            let index = CLAIM.with(Claim::index).unwrap();
            assert_eq!(TABLE[index].active.load(Ordering::Relaxed), 1);
            let nested = enter().expect("the same slot");
            drop(reading);
            assert_eq!(TABLE[index].active.load(Ordering::Relaxed), 1);
            drop(nested);
            assert_eq!(TABLE[index].active.load(Ordering::Relaxed), 0);
            assert_eq!(CLAIM.with(Claim::index), Some(index));
        })
        .join()
        .unwrap();
        // More threads over time than there are slots: each gives its
        // slot back as it ends.
        for _ in 0..2 * SLOTS {
            std::thread::spawn(|| assert!(enter().is_some()))
                .join()
                .unwrap();
        }
        // Nothing announced: a writer does not wait.
        wait();
    }

    #[test]
    fn turns_on_the_lock_come_seldom_and_soon_after_one_found_the_thread_alone() {
        std::thread::spawn(|| {
            let turns = |reads: u32| (0..reads).filter(|_| enter().is_none()).count();
            assert_eq!(turns(LOCKED_EVERY), 0);
            assert_eq!(turns(1), 1);
            alone();
            assert_eq!(turns(ALONE_EVERY), 0);
            assert_eq!(turns(1), 1);
            // A turn that found others: seldom again.
            assert_eq!(turns(LOCKED_EVERY), 0);
            assert_eq!(turns(1), 1);
        })
        .join()
        .unwrap();
    }
}
