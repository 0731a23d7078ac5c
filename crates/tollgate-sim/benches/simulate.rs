//! The simulator's hot paths: Python-compatible draws, the worst-span
//! metric, and a slice of the accuracy study (the bulk of `tollgate
//! simulate`'s time).

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use tollgate_sim::metrics::{worst_span, Charge};
use tollgate_sim::rng::PyRandom;
use tollgate_sim::scenarios::accuracy::{self, Config};
use tollgate_sim::scenarios::Name;

fn draws(c: &mut Criterion) {
    let mut g = c.benchmark_group("rng");
    g.throughput(Throughput::Elements(1));
    let mut r = PyRandom::new(42);
    g.bench_function("expovariate", |b| b.iter(|| black_box(r.expovariate(6.0))));
    g.finish();
}

fn span(c: &mut Criterion) {
    let charges: Vec<Charge> = (0..1_000_000u64)
        .map(|i| Charge {
            at: i * 37_000_000,
            cost: 1,
        })
        .collect();
    let mut g = c.benchmark_group("worst_span");
    g.throughput(Throughput::Elements(charges.len() as u64));
    g.bench_function("1M charges, 60 s", |b| {
        b.iter(|| worst_span(black_box(&charges), 60_000_000_000))
    });
    g.finish();
}

fn study(c: &mut Criterion) {
    let config = Config {
        keys: 200,
        runs: 1,
        ..Config::PUBLISHED
    };
    let mut g = c.benchmark_group("accuracy");
    g.sample_size(10);
    // About 1,040 requests per key, both shapes.
    g.throughput(Throughput::Elements(config.work() * 1_040));
    g.bench_function("200 keys x 2 shapes", |b| {
        b.iter(|| accuracy::run(black_box(&config), &()))
    });
    g.finish();
    c.bench_function("boundary-burst scenario", |b| {
        b.iter(|| Name::BoundaryBurst.run(&Default::default(), &()))
    });
}

criterion_group!(benches, draws, span, study);
criterion_main!(benches);
