//! What the resilience layers add to a decision: `Resilient` over process
//! memory (breaker closed), over a store that is down (breaker open, the
//! decision failing open or to the in-process fallback), and `Batched`
//! spending from a lease.
//!
//! ```text
//! cargo bench -p tollgate --bench resilient -- --warm-up-time 1 --measurement-time 3
//! ```

use std::future::{ready, Future};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate::{
    Algorithm, Backend, BackendError, BatchConfig, Batched, BreakerConfig, Decision, FailurePolicy,
    Lease, Limit, MemoryBackend, OnStoreError, Policy, Quota, Resilient,
};

/// A store that refuses every connection.
struct Down;

fn refused<T: Send>() -> impl Future<Output = Result<T, BackendError>> + Send {
    ready(Err(BackendError::Unavailable("connection refused".into())))
}

impl Backend for Down {
    fn check(
        &self,
        _: &str,
        _: &Policy,
        _: u64,
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send {
        refused()
    }
    fn reset(&self, _: &str, _: &Policy) -> impl Future<Output = Result<(), BackendError>> + Send {
        refused()
    }
    fn refund(
        &self,
        _: &str,
        _: &Policy,
        _: u64,
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send {
        refused()
    }
    fn force(
        &self,
        _: &str,
        _: &Policy,
        _: u64,
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send {
        refused()
    }
    fn lease(
        &self,
        _: &str,
        _: &Policy,
        _: u64,
    ) -> impl Future<Output = Result<Lease, BackendError>> + Send {
        refused()
    }
}

fn layers(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let policy: Policy =
        Limit::new(Algorithm::Gcra, Quota::per_second(1_000_000_000).unwrap()).into();
    let opens = BreakerConfig::default()
        .consecutive(1)
        .open_for(Duration::from_secs(3600));
    let mut group = c.benchmark_group("resilient");

    let memory = MemoryBackend::new();
    group.bench_function("memory, direct", |b| {
        b.iter(|| runtime.block_on(memory.check("key", &policy, 1)))
    });
    let healthy = Resilient::builder(MemoryBackend::new()).build();
    group.bench_function("memory, breaker closed", |b| {
        b.iter(|| runtime.block_on(healthy.check("key", &policy, 1)))
    });
    for (name, on_error) in [
        ("down, breaker open, fail open", OnStoreError::Open),
        (
            "down, breaker open, fallback",
            OnStoreError::Fallback { instances: 4 },
        ),
    ] {
        let down = Resilient::builder(Down)
            .breaker(opens)
            .default_policy(FailurePolicy::new(on_error))
            .build();
        let _ = runtime.block_on(down.check("key", &policy, 1));
        group.bench_function(name, |b| {
            b.iter(|| runtime.block_on(down.check("key", &policy, 1)))
        });
    }
    let batched = Batched::new(
        MemoryBackend::new(),
        BatchConfig::default().batch(1000).hot_rate(0),
    );
    group.bench_function("batched, spent from a lease", |b| {
        b.iter(|| runtime.block_on(batched.check("key", &policy, 1)))
    });
    group.finish();
}

criterion_group!(benches, layers);
criterion_main!(benches);
