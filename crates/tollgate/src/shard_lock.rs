//! The lock of one shard: many readers or one writer, in one word.
//!
//! Readers are lookups that only decide a denial (which changes nothing);
//! writers charge, insert, remove and sweep. Readers never wait for one
//! another, so a hot key that many threads are being refused is not a queue
//! on one lock. Nobody sleeps: a shard is held for tens of nanoseconds, so
//! a waiter spins briefly and then yields its time slice, never parks (a
//! park and wake costs microseconds of system time). Taking and releasing
//! it costs one atomic read-modify-write each, as a mutex does.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Set while a writer holds the lock.
const WRITER: usize = 1;
/// Added by each reader inside.
const READER: usize = 2;

/// `T` behind a readers-writer spin lock.
pub(crate) struct ShardLock<T> {
    state: AtomicUsize,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out `&T` to several threads only while no `&mut T`
// exists, and `&mut T` to one thread at a time, as `RwLock` does.
unsafe impl<T: Send + Sync> Sync for ShardLock<T> {}
// SAFETY: moving the lock moves the value, which may be sent.
unsafe impl<T: Send> Send for ShardLock<T> {}

/// Shared access, released on drop.
pub(crate) struct ReadGuard<'a, T> {
    lock: &'a ShardLock<T>,
}

/// Exclusive access, released on drop.
pub(crate) struct WriteGuard<'a, T> {
    lock: &'a ShardLock<T>,
}

impl<T> ShardLock<T> {
    pub(crate) fn new(value: T) -> Self {
        ShardLock {
            state: AtomicUsize::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// Shared access, once no writer holds the lock, and whether nobody
    /// else held it when asked.
    #[inline]
    pub(crate) fn read(&self) -> (ReadGuard<'_, T>, bool) {
        let mut backoff = Backoff::default();
        loop {
            let before = self.state.fetch_add(READER, Ordering::Acquire);
            if before & WRITER == 0 {
                return (ReadGuard { lock: self }, before == 0);
            }
            self.state.fetch_sub(READER, Ordering::Relaxed);
            while self.state.load(Ordering::Relaxed) & WRITER != 0 {
                backoff.wait();
            }
        }
    }

    /// Exclusive access, once nobody else holds the lock, and whether
    /// someone else did when asked.
    #[inline]
    pub(crate) fn write(&self) -> (WriteGuard<'_, T>, bool) {
        let mut backoff = Backoff::default();
        let mut waited = false;
        loop {
            if self
                .state
                .compare_exchange_weak(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return (WriteGuard { lock: self }, waited);
            }
            waited = true;
            while self.state.load(Ordering::Relaxed) != 0 {
                backoff.wait();
            }
        }
    }
}

impl<T> Deref for ReadGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: readers hold the lock: no writer until this guard drops.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> Drop for ReadGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.state.fetch_sub(READER, Ordering::Release);
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
        // Readers that came and backed off meanwhile have left their
        // count in place for a moment: clear only the writer's bit.
        self.lock.state.fetch_sub(WRITER, Ordering::Release);
    }
}

/// Spins a little longer each time, then yields the CPU.
#[derive(Default)]
struct Backoff {
    step: u32,
}

impl Backoff {
    fn wait(&mut self) {
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
    fn writers_exclude_everyone_and_readers_share() {
        let lock = ShardLock::new(0u64);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        *lock.write().0 += 1;
                        let (a, _) = lock.read();
                        let (b, alone) = lock.read();
                        assert!(!alone, "`a` is inside");
                        assert_eq!(*a, *b);
                    }
                });
            }
        });
        assert_eq!(*lock.read().0, 40_000);
    }
}
