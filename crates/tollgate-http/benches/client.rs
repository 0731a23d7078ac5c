//! What the client layer adds to one outgoing request, in process: reading
//! the rate-limit headers of an answer (`learn`), and a whole
//! `Outbound::send` (shape, send to a closure that answers at once, learn)
//! against the closure called bare, on one key with a generous quota.

use std::time::{Duration, SystemTime};

use criterion::{criterion_group, criterion_main, Criterion};
use http::{HeaderMap, HeaderValue, Method, Response};
use tollgate::{Algorithm, Limit, Quota};
use tollgate_http::client::{Outbound, Outgoing};
use tollgate_http::learn::{learn, DEFAULT_MAX_PAUSE};

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(n, v)| {
            (
                http::HeaderName::from_static(n),
                HeaderValue::from_static(v),
            )
        })
        .collect()
}

fn bench_learn(c: &mut Criterion) {
    let sets = [
        (
            "ietf",
            headers(&[
                ("ratelimit-policy", r#""per-key";q=100;w=60"#),
                ("ratelimit", r#""per-key";r=41;t=17"#),
            ]),
        ),
        (
            "openai",
            headers(&[
                ("x-ratelimit-remaining-requests", "499"),
                ("x-ratelimit-reset-requests", "120ms"),
                ("x-ratelimit-remaining-tokens", "29980"),
                ("x-ratelimit-reset-tokens", "6m0s"),
            ]),
        ),
        (
            "anthropic",
            headers(&[
                ("anthropic-ratelimit-requests-remaining", "49"),
                ("anthropic-ratelimit-requests-reset", "2024-06-01T12:00:45Z"),
                ("retry-after", "Sat, 01 Jun 2024 12:00:30 GMT"),
            ]),
        ),
        ("none", headers(&[("content-type", "application/json")])),
    ];
    let now = SystemTime::now();
    let mut group = c.benchmark_group("client/learn");
    for (name, map) in &sets {
        group.bench_function(*name, |b| {
            b.iter(|| learn(std::hint::black_box(map), now, DEFAULT_MAX_PAUSE))
        });
    }
    group.finish();
}

fn bench_send(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let limit = Limit::new(Algorithm::Gcra, Quota::per_second(1_000_000_000).unwrap());
    let outbound = Outbound::new(limit)
        .unwrap()
        .deadline(Duration::from_secs(1));
    let headers = HeaderMap::new();
    let out = Outgoing {
        method: &Method::GET,
        host: "api.example.com",
        path: "/v1/things",
        headers: &headers,
        replayable: true,
    };
    let answer = || async { Ok::<_, ()>(Response::new(())) };
    let mut group = c.benchmark_group("client/send");
    group.bench_function("bare", |b| b.iter(|| runtime.block_on(answer())));
    group.bench_function("outbound", |b| {
        b.iter(|| runtime.block_on(outbound.send(&out, answer, |_| false)))
    });
    group.finish();
}

criterion_group!(benches, bench_learn, bench_send);
criterion_main!(benches);
