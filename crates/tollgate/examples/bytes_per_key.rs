//! Bytes of heap per key at 1,000,000 keys, for each algorithm, next to
//! governor's keyed limiter.
//!
//! A counting global allocator records the bytes requested (malloc's own
//! per-block overhead is not included: the tables are a few large blocks,
//! and only the sliding log allocates per key). Keys are `u64`, each charged
//! once at a frozen time so none is idle, then the total is divided by the
//! key count. Each limiter is measured grown on demand (the default) and
//! presized with `LimiterBuilder::capacity`.
//!
//! Run: `cargo run --release -p tollgate --example bytes_per_key [KEYS]`

use std::alloc::{GlobalAlloc, Layout, System};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};

use tollgate::{Algorithm, FakeClock, Limit, Limiter, Policy, Quota};

/// The system allocator, counting the bytes currently allocated.
struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size, Ordering::Relaxed);
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap bytes held by what `build` returns, per key.
fn per_key<T>(keys: u64, build: impl FnOnce() -> T) -> f64 {
    let before = ALLOCATED.load(Ordering::Relaxed);
    let held = build();
    let bytes = ALLOCATED.load(Ordering::Relaxed) - before;
    drop(held);
    bytes as f64 / keys as f64
}

fn ours(policy: Policy, keys: u64, capacity: usize) -> Limiter<u64, FakeClock> {
    let limiter = Limiter::builder(policy)
        .clock(FakeClock::new())
        .capacity(capacity)
        .build();
    for key in 0..keys {
        assert!(limiter.check(&key).allowed);
    }
    limiter
}

/// Bytes per key grown on demand, and presized with `capacity(keys)`.
fn both(policy: &Policy, keys: u64) -> (f64, f64) {
    let grown = per_key(keys, || ours(policy.clone(), keys, 0));
    let sized = per_key(keys, || ours(policy.clone(), keys, keys as usize));
    (grown, sized)
}

fn main() {
    let keys: u64 = std::env::args()
        .nth(1)
        .map_or(1_000_000, |n| n.parse().expect("KEYS must be a number"));
    let quota = Quota::per_minute(100).expect("valid quota");
    println!(
        "| store | bytes per key at {keys} keys, grown on demand | with `.capacity({keys})` |"
    );
    println!("|---|---:|---:|");
    for algorithm in Algorithm::ALL {
        let (grown, sized) = both(&Limit::new(algorithm, quota).into(), keys);
        println!("| tollgate `{algorithm}` | {grown:.1} | {sized:.1} |");
    }
    let two = Policy::with_limits(vec![
        Limit::new(Algorithm::Gcra, Quota::per_second(10).expect("valid quota")),
        Limit::new(Algorithm::FixedWindow, quota),
    ])
    .expect("two limits");
    let (grown, sized) = both(&two, keys);
    println!("| tollgate `gcra` 10/s + `fixed_window` 100/min | {grown:.1} | {sized:.1} |");
    let bytes = per_key(keys, || {
        let per_minute = NonZeroU32::new(100).expect("non-zero");
        let governor = governor::DefaultKeyedRateLimiter::<u64>::keyed(
            governor::Quota::per_minute(per_minute),
        );
        for key in 0..keys {
            assert!(governor.check_key(&key).is_ok());
        }
        governor
    });
    println!("| governor 0.10 keyed (GCRA) | {bytes:.1} | |");
}
