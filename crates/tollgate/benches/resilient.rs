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
    Algorithm, Backend, BackendError, BackendExt, BatchConfig, Batched, BreakerConfig,
    FailurePolicy, Limit, MemoryBackend, OnStoreError, Operation, Outcome, Policy, Quota,
    Resilient,
};

/// A store that refuses every connection.
struct Down;

impl Backend for Down {
    type Prepared = ();

    fn prepare(&self, _: &Policy) -> Result<(), BackendError> {
        Ok(())
    }

    fn apply(
        &self,
        _: &str,
        _: &(),
        _: Operation,
    ) -> impl Future<Output = Result<Outcome, BackendError>> + Send {
        ready(Err(BackendError::Unavailable("connection refused".into())))
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
    let prepared = memory.prepare(&policy).unwrap();
    group.bench_function("memory, direct", |b| {
        b.iter(|| runtime.block_on(memory.check("key", &prepared, 1)))
    });
    let healthy = Resilient::builder(MemoryBackend::new()).build();
    let prepared = healthy.prepare(&policy).unwrap();
    group.bench_function("memory, breaker closed", |b| {
        b.iter(|| runtime.block_on(healthy.check("key", &prepared, 1)))
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
        let prepared = down.prepare(&policy).unwrap();
        let _ = runtime.block_on(down.check("key", &prepared, 1));
        group.bench_function(name, |b| {
            b.iter(|| runtime.block_on(down.check("key", &prepared, 1)))
        });
    }
    let batched = Batched::new(
        MemoryBackend::new(),
        BatchConfig::default().batch(1000).hot_rate(0),
    );
    let prepared = batched.prepare(&policy).unwrap();
    group.bench_function("batched, spent from a lease", |b| {
        b.iter(|| runtime.block_on(batched.check("key", &prepared, 1)))
    });
    group.finish();
}

criterion_group!(benches, layers);
criterion_main!(benches);
