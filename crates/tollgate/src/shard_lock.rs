//! The lock of one shard (and of one stripe of a heavy-hitter summary,
//! `crate::top`): one writer at a time, and readers that take no lock at all.
//!
//! Writers charge, insert, remove and sweep. A reader (a lookup that only
//! decides a denial, which changes nothing) writes nothing: it loads the
//! lock's version, copies what it needs, and loads the version again; if a
//! writer came in between, the copy may be torn and the reader takes the
//! lock instead (a sequence lock). So threads refused on one hot key keep
//! their copies of its cache lines instead of moving them between cores on
//! every check. Nobody sleeps: a shard is held for tens of nanoseconds, so
//! a waiting writer spins briefly and then yields its time slice, never
//! parks (a park and wake costs microseconds of system time).
//!
//! The version is a word of its own beside the lock word, not the lock
//! word itself: taking the lock stays a compare-and-swap from 0, which
//! needs no load first, and a writer bumps the version with a plain add on
//! the line it already holds (a version in the lock word cost the check
//! 4–6 instructions more, counted by callgrind; so did the waiting loop
//! inlined into every caller). Releasing is a plain store: only the
//! holder writes the lock word.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// `T` behind a lock that readers may also read without.
pub(crate) struct ShardLock<T> {
    /// 1 while a writer holds the lock, else 0.
    held: AtomicU64,
    /// Bumped by each writer as it takes the lock, before it writes.
    version: AtomicU64,
    value: UnsafeCell<T>,
}

// SAFETY: `&mut T` goes to one thread at a time, as with a mutex; readers
// without the lock only copy bits out through a raw pointer and use them
// after checking that no writer came meanwhile.
unsafe impl<T: Send + Sync> Sync for ShardLock<T> {}
// SAFETY: moving the lock moves the value, which may be sent.
unsafe impl<T: Send> Send for ShardLock<T> {}

/// Exclusive access, released on drop.
pub(crate) struct WriteGuard<'a, T> {
    lock: &'a ShardLock<T>,
}

impl<T> ShardLock<T> {
    pub(crate) fn new(value: T) -> Self {
        ShardLock {
            held: AtomicU64::new(0),
            version: AtomicU64::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// Exclusive access, once nobody else holds the lock.
    #[inline]
    pub(crate) fn write(&self) -> WriteGuard<'_, T> {
        if self.try_take() {
            return self.taken();
        }
        self.write_contended()
    }

    /// [`Self::write`] once the first try failed: waits for the holder.
    #[cold]
    #[inline(never)]
    fn write_contended(&self) -> WriteGuard<'_, T> {
        let mut backoff = Backoff::default();
        loop {
            while self.held.load(Ordering::Relaxed) != 0 {
                backoff.wait();
            }
            if self.try_take() {
                return self.taken();
            }
        }
    }

    /// Takes the lock if nobody holds it. (Not the weak exchange: a failure
    /// is taken for someone in the way, which a spurious one is not.)
    #[inline(always)]
    fn try_take(&self) -> bool {
        self.held
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// The guard of the lock just taken, once the version says so.
    #[inline(always)]
    fn taken(&self) -> WriteGuard<'_, T> {
        // Release: a reader that sees a write made under this lock sees the
        // new version too, and discards its copy.
        let version = self.version.load(Ordering::Relaxed);
        self.version.store(version + 1, Ordering::Release);
        fence(Ordering::Release);
        WriteGuard { lock: self }
    }

    /// The version to check an optimistic read against ([`Self::unchanged`]),
    /// or `None` while a writer holds the lock. Reads of the value after it
    /// see everything the writers before it wrote. The lock word is loaded
    /// sequentially consistently (on x86 the same plain load as an acquire)
    /// for [`crate::readers`].
    #[inline(always)]
    pub(crate) fn read_version(&self) -> Option<u64> {
        let version = self.version.load(Ordering::Acquire);
        (self.held.load(Ordering::SeqCst) == 0).then_some(version)
    }

    /// The value, for optimistic reads: copied through the pointer by
    /// volatile reads, and used only if [`Self::unchanged`] says so.
    #[cfg(debug_assertions)]
    pub(crate) fn value_ptr(&self) -> *const T {
        self.value.get()
    }

    /// Whether no writer took the lock since [`Self::read_version`] gave
    /// `version`: then whatever was read in between is a consistent copy.
    #[inline(always)]
    pub(crate) fn unchanged(&self, version: u64) -> bool {
        // The reads before it are not moved after the load below.
        fence(Ordering::Acquire);
        self.version.load(Ordering::Relaxed) == version
    }
}

impl<T> Deref for WriteGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock alone.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for WriteGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard holds the lock alone, and `&mut self` makes
        // the reference unique.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for WriteGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // Only the holder writes the lock word.
        self.lock.held.store(0, Ordering::Release);
    }
}

/// Spins a little longer each time, then yields the CPU: for waits on a
/// holder that is gone within nanoseconds unless it was descheduled.
#[derive(Default)]
pub(crate) struct Backoff {
    step: u32,
}

impl Backoff {
    /// Waits a little, longer than the last time.
    pub(crate) fn wait(&mut self) {
        if self.step < 6 {
            for _ in 0..1u32 << self.step {
                std::hint::spin_loop();
            }
            self.step += 1;
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers_exclude_one_another_and_readers_see_whole_writes() {
        // Two words a writer keeps equal: a reader whose version check
        // passes never sees them differ.
        let lock = ShardLock::new((0u64, 0u64));
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        let mut guard = lock.write();
                        guard.0 += 1;
                        guard.1 += 1;
                    }
                });
            }
            s.spawn(|| {
                for _ in 0..10_000 {
                    let Some(version) = lock.read_version() else {
                        continue;
                    };
                    // SAFETY: a volatile copy of plain integers, used only
                    // if no writer came meanwhile.
                    let copy = unsafe { lock.value.get().read_volatile() };
                    if lock.unchanged(version) {
                        assert_eq!(copy.0, copy.1);
                    }
                }
            });
        });
        let guard = lock.write();
        assert_eq!(*guard, (20_000, 20_000));
        drop(guard);
        assert_eq!(lock.read_version(), Some(20_001));
    }
}
