//! The cost of counting one hit in a rule's heavy-hitter summary
//! (`HeavyHitters::record`), the work the layer and `serve` add per
//! decision: a key already tracked (a hash lookup and a move to the bucket
//! of its new count, no allocation), and a stream of keys never seen before
//! (each replacing one of the smallest tracked keys). Timings mean
//! something only on a quiet machine.
//!
//! Run: `cargo bench -p tollgate --bench top -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tollgate::top::{HeavyHitters, Hit, TopConfig};

fn record(c: &mut Criterion) {
    let mut group = c.benchmark_group("top/record");
    group.throughput(Throughput::Elements(1));
    let keys: Vec<String> = (0..100).map(|i| format!("ip=203.0.113.{i}")).collect();
    let tracked = HeavyHitters::new(TopConfig::default());
    for key in &keys {
        tracked.record(0, key, Hit::Admitted, 1);
    }
    let mut i = 0;
    group.bench_function("tracked_key", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            tracked.record(black_box(1), black_box(&keys[i]), Hit::Admitted, 1);
        })
    });
    let fresh = HeavyHitters::new(TopConfig::default());
    let unseen: Vec<String> = (0..1_000_000).map(|i| format!("ip=10.{i}")).collect();
    let mut j = 0;
    group.bench_function("new_key", |b| {
        b.iter(|| {
            j = (j + 1) % unseen.len();
            fresh.record(black_box(1), black_box(&unseen[j]), Hit::Refused, 1);
        })
    });
    group.finish();
}

criterion_group!(benches, record);
criterion_main!(benches);
