//! Where a limiter's time comes from, and how it waits.
//!
//! A [`Clock`] gives nanoseconds that never run backwards; an
//! `AsyncClock` (feature `async`) also sleeps on that same time line, so
//! code that waits (`Limiter::until_ready`) can be tested with a
//! [`FakeClock`] without any real sleeping.

#[cfg(feature = "async")]
use std::future::Future;
#[cfg(feature = "async")]
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Waker;
#[cfg(feature = "async")]
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;

/// A monotonic source of time in nanoseconds.
pub trait Clock: Send + Sync {
    /// Nanoseconds since the clock's own origin. Never decreases on one
    /// thread.
    fn now(&self) -> u64;

    /// How far a reading taken under a lock may fall behind one that the
    /// lock's previous holder took on another thread: 0 (the default) for
    /// a clock whose readings are ordered by the lock. A limiter takes a
    /// key's time that is ahead of `now` by no more than this for `now`,
    /// rather than for a reservation holding the key.
    fn reorder_window(&self) -> u64 {
        0
    }
}

/// A [`Clock`] that can also wait on its own time line (feature `async`).
#[cfg(feature = "async")]
pub trait AsyncClock: Clock {
    /// Completes once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send;
}

/// The default clock: the CPU's time-stamp counter through `quanta`
/// (a few nanoseconds per read), counted from the clock's creation. Sleeps
/// with tokio's timer (feature `async`), so waiting needs a tokio runtime
/// with time enabled.
///
/// The CPU may run `rdtsc` before a lock taken just ahead of it has been
/// acquired, so a reading can come out earlier than the one the lock's
/// previous holder stored (measured here: about one locked read in 100 by
/// two threads, up to 170 ns behind). A fence (`lfence`) before each read
/// orders them but doubled the cost of a check; instead the clock declares
/// a [`Clock::reorder_window`] of 10 µs, and a limiter reads a key's time
/// that far ahead as the present.
#[derive(Clone, Debug)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    origin: u64,
}

impl MonotonicClock {
    /// A clock whose time 0 is now.
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        MonotonicClock { clock, origin }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> u64 {
        self.clock.delta_as_nanos(self.origin, self.clock.raw())
    }

    #[inline]
    fn reorder_window(&self) -> u64 {
        // Far above the 170 ns measured, far below any period worth
        // limiting: a request within 10 µs of a reservation's time is
        // decided at that time.
        10_000
    }
}

#[cfg(feature = "async")]
impl AsyncClock for MonotonicClock {
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(duration)
    }
}

/// A [`MonotonicClock`] whose time 0 is the Unix epoch: read once from the
/// system clock at creation, then advanced by the monotonic clock. A fixed
/// window of a whole unit then starts on that unit's boundary (each minute
/// at :00), as in every shared store and in envoyproxy/ratelimit, rather
/// than at the process's start.
#[derive(Clone, Debug)]
pub struct UnixClock {
    monotonic: MonotonicClock,
    origin: u64,
}

impl UnixClock {
    /// A clock reading the nanoseconds since the Unix epoch.
    pub fn new() -> Self {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX / 2));
        UnixClock {
            monotonic: MonotonicClock::new(),
            origin: since_epoch,
        }
    }
}

impl Default for UnixClock {
    fn default() -> Self {
        UnixClock::new()
    }
}

impl Clock for UnixClock {
    #[inline]
    fn now(&self) -> u64 {
        self.origin.saturating_add(self.monotonic.now())
    }

    #[inline]
    fn reorder_window(&self) -> u64 {
        self.monotonic.reorder_window()
    }
}

#[cfg(feature = "async")]
impl AsyncClock for UnixClock {
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        self.monotonic.sleep(duration)
    }
}

/// A clock that moves only when told to, for tests.
///
/// Clones share the same time. [`FakeClock::advance`] and [`FakeClock::set`]
/// wake the sleepers whose time has come, so a test drives waiting code by
/// moving the clock, never by sleeping.
#[derive(Clone, Debug, Default)]
pub struct FakeClock {
    inner: Arc<FakeInner>,
}

#[derive(Debug, Default)]
struct FakeInner {
    now: AtomicU64,
    /// Wake-up time and waker of each pending sleep.
    sleepers: Mutex<Vec<(u64, Waker)>>,
}

impl FakeClock {
    /// A fake clock at time 0.
    pub fn new() -> Self {
        FakeClock::default()
    }

    /// A fake clock at `now` nanoseconds.
    pub fn at(now: u64) -> Self {
        let clock = FakeClock::new();
        clock.set(now);
        clock
    }

    /// Moves the clock forward by `duration` (saturating).
    pub fn advance(&self, duration: Duration) {
        let ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        let mut current = self.inner.now.load(Ordering::Acquire);
        loop {
            let next = current.saturating_add(ns);
            match self.inner.now.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(seen) => current = seen,
            }
        }
        self.wake_due();
    }

    /// Moves the clock to `now` nanoseconds. A clock never runs backwards, so
    /// a time earlier than the current one is ignored.
    pub fn set(&self, now: u64) {
        self.inner.now.fetch_max(now, Ordering::AcqRel);
        self.wake_due();
    }

    /// How many sleeps are waiting for the clock to move.
    pub fn sleepers(&self) -> usize {
        self.inner.sleepers.lock().len()
    }

    fn wake_due(&self) {
        let now = self.now();
        let due: Vec<Waker> = {
            let mut sleepers = self.inner.sleepers.lock();
            let (due, waiting) = sleepers.drain(..).partition(|(at, _)| *at <= now);
            *sleepers = waiting;
            due.into_iter().map(|(_, waker)| waker).collect()
        };
        due.into_iter().for_each(Waker::wake);
    }
}

impl Clock for FakeClock {
    #[inline]
    fn now(&self) -> u64 {
        self.inner.now.load(Ordering::Acquire)
    }
}

#[cfg(feature = "async")]
impl AsyncClock for FakeClock {
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        let ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        FakeSleep {
            clock: self.clone(),
            until: self.now().saturating_add(ns),
        }
    }
}

/// The future of [`FakeClock::sleep`].
#[cfg(feature = "async")]
struct FakeSleep {
    clock: FakeClock,
    until: u64,
}

#[cfg(feature = "async")]
impl Future for FakeSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut sleepers = self.clock.inner.sleepers.lock();
        // Checked under the lock so an `advance` cannot slip in between the
        // check and the registration and leave this sleep unwoken.
        if self.clock.now() >= self.until {
            return Poll::Ready(());
        }
        sleepers.push((self.until, cx.waker().clone()));
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_clock_reads_the_time_since_the_epoch() {
        let epoch_ns = |t: std::time::SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        };
        let before = epoch_ns(std::time::SystemTime::now());
        let clock = UnixClock::new();
        let read = clock.now();
        let after = epoch_ns(std::time::SystemTime::now());
        // Its origin is the system clock's reading at creation, so a read
        // falls between two system readings around it.
        assert!(
            before <= read && read <= after + 1_000_000,
            "{before} {read} {after}"
        );
        assert!(clock.now() >= read);
    }

    #[test]
    fn fake_clock_only_moves_forward() {
        let clock = FakeClock::at(10);
        clock.advance(Duration::from_nanos(5));
        assert_eq!(clock.now(), 15);
        clock.set(3);
        assert_eq!(clock.now(), 15);
        clock.set(40);
        assert_eq!(clock.clone().now(), 40);
    }

    #[test]
    fn monotonic_clock_does_not_run_backwards() {
        let clock = MonotonicClock::new();
        let mut last = clock.now();
        for _ in 0..1000 {
            let now = clock.now();
            assert!(now >= last);
            last = now;
        }
    }

    #[cfg(feature = "async")]
    #[tokio::test]
    async fn fake_sleep_ends_when_the_clock_reaches_it() {
        let clock = FakeClock::new();
        let sleeper = clock.sleep(Duration::from_millis(5));
        let driver = async {
            while clock.sleepers() == 0 {
                tokio::task::yield_now().await;
            }
            clock.advance(Duration::from_millis(4));
            assert_eq!(clock.sleepers(), 1, "woken too early");
            clock.advance(Duration::from_millis(1));
        };
        tokio::join!(sleeper, driver);
        assert_eq!(clock.now(), 5_000_000);
    }
}
