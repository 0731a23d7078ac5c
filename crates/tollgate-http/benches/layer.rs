//! What the layer adds to one request, in process: the same trivial service
//! bare, behind 1 rule and behind 3 layered rules, memory backend, 10,000
//! client keys, through `tower::ServiceExt::oneshot`; once mostly admitting
//! (generous quotas) and once mostly refusing (1 request an hour per key);
//! each layered row twice in a row, with the heavy-hitter summaries on (the
//! default) and off, so that the summary's share is the difference between
//! two neighbouring rows.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tower::{Layer, ServiceExt};

mod layer_setup;

use layer_setup::{handler, layer, request, KEYS};

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("http_layer");
    let mut i = 0u32;
    let bare = handler();
    group.bench_function("bare", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            runtime.block_on(bare.clone().oneshot(request(i))).unwrap()
        })
    });
    for refuse in [false, true] {
        for rules in [1, 3] {
            for summaries in [true, false] {
                let svc = layer(rules, refuse, summaries).layer(handler());
                // Every key seen once, so the refusing run refuses.
                for k in 0..KEYS {
                    runtime.block_on(svc.clone().oneshot(request(k))).unwrap();
                }
                let status = runtime
                    .block_on(svc.clone().oneshot(request(0)))
                    .unwrap()
                    .status();
                assert_eq!(status.as_u16(), if refuse { 429 } else { 200 });
                let name = if refuse { "refusing" } else { "admitting" };
                let off = if summaries { "" } else { ", summary off" };
                let id = BenchmarkId::new(name, format!("{rules} rule(s){off}"));
                group.bench_function(id, |b| {
                    b.iter(|| {
                        i = i.wrapping_add(1);
                        runtime.block_on(svc.clone().oneshot(request(i))).unwrap()
                    })
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
