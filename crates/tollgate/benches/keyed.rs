//! tollgate's keyed `Limiter` next to governor's keyed limiter
//! (`DefaultKeyedRateLimiter`: DashMap + atomic GCRA), on the same GCRA
//! quotas and the same key sets: 1, 1,000 and 1,000,000 `u64` keys, visited
//! in turn; 1 and 2 threads; a generous quota (almost every check admitted)
//! and a stingy one (almost every check denied). Every key is created before
//! measuring, so the figures are steady-state lookups plus decisions. The
//! figure is CPU time per check (thread CPU clocks, summed over threads).
//!
//! Run: `cargo bench -p tollgate --bench keyed -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use governor::{DefaultKeyedRateLimiter, Quota as GovQuota, RateLimiter};
use tollgate::{Algorithm, Limit, Limiter, Quota};

/// One quota in both libraries' terms: `limit` per `period`, burst `limit`.
#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    limit: u32,
    period: Duration,
}

/// Every check admitted: 10^9 a second (one a nanosecond) with as large a
/// burst, far beyond what the benchmark can spend, and a quota whose keys
/// fit the compact 16-byte form, as everyday quotas do.
const ALLOWED: Shape = Shape {
    name: "allowed",
    limit: 1_000_000_000,
    period: Duration::from_secs(1),
};
/// Every check after a key's first denied: one request per hour.
const DENIED: Shape = Shape {
    name: "denied",
    limit: 1,
    period: Duration::from_secs(3600),
};

fn ours(shape: Shape) -> Limiter<u64> {
    let quota =
        Quota::new(u64::from(shape.limit), shape.period.as_nanos() as u64).expect("valid quota");
    Limiter::new(Limit::new(Algorithm::Gcra, quota))
}

fn theirs(shape: Shape) -> DefaultKeyedRateLimiter<u64> {
    let limit = NonZeroU32::new(shape.limit).expect("non-zero");
    let quota = GovQuota::with_period(shape.period / shape.limit)
        .expect("non-zero period")
        .allow_burst(limit);
    RateLimiter::keyed(quota)
}

/// `count` checks walking the key set from `key`; returns the CPU time the
/// calling thread spent on them.
fn walk(mut key: u64, count: u64, keys: u64, check: &impl Fn(u64) -> bool) -> Duration {
    let start = thread_cpu_time();
    for _ in 0..count {
        black_box(check(black_box(key)));
        key += 1;
        if key == keys {
            key = 0;
        }
    }
    thread_cpu_time() - start
}

/// The calling thread's CPU time. The machine the figures come from is
/// shared with other work, so wall time would mostly measure how often the
/// benchmark was scheduled out; CPU time measures both libraries' work.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Runs `iters` checks spread over `threads` threads (one thread runs on
/// the bench's own), each walking the key set from its own offset; returns
/// the CPU time of all threads together, so the figure per iteration is the
/// CPU cost of one check, contention included.
fn run(threads: u64, iters: u64, keys: u64, check: &(impl Fn(u64) -> bool + Sync)) -> Duration {
    if threads == 1 {
        return walk(0, iters, keys, check);
    }
    let per_thread = iters.div_ceil(threads);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| s.spawn(move || walk(t * keys / threads % keys, per_thread, keys, check)))
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("bench thread"))
            .sum()
    })
}

fn keyed(c: &mut Criterion) {
    for keys in [1u64, 1_000, 1_000_000] {
        for shape in [ALLOWED, DENIED] {
            let ours = ours(shape);
            let theirs = theirs(shape);
            for key in 0..keys {
                ours.check(&key);
                let _ = theirs.check_key(&key);
            }
            for threads in [1u64, 2] {
                let mut group =
                    c.benchmark_group(format!("keyed/{keys}keys/{threads}t/{}", shape.name));
                group.throughput(Throughput::Elements(1));
                group.bench_function(BenchmarkId::from_parameter("tollgate"), |b| {
                    b.iter_custom(|iters| run(threads, iters, keys, &|k| ours.check(&k).allowed))
                });
                group.bench_function(BenchmarkId::from_parameter("governor"), |b| {
                    b.iter_custom(|iters| {
                        run(threads, iters, keys, &|k| theirs.check_key(&k).is_ok())
                    })
                });
                group.finish();
            }
        }
    }
}

criterion_group!(benches, keyed);
criterion_main!(benches);
