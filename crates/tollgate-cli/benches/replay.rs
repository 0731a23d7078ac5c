//! Replay throughput: decisions per second on a generated 1M-line trace,
//! CSV parsing and output formatting included (output goes to a sink
//! through the same buffered writer as the command uses).

use std::fmt::Write as _;
use std::io::{self, BufWriter};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tollgate_cli::trace;
use tollgate_core::{Algorithm, Limit, Quota};

/// Requests in the trace.
const REQUESTS: u64 = 1_000_000;
/// Keys the requests are spread over, round robin.
const KEYS: u64 = 8;

/// One request per microsecond over `KEYS` keys: each key gets 125 000/s
/// against a quota of 100 000/s, so about one request in five is refused.
fn generated_trace() -> String {
    let mut text = String::with_capacity(32 * REQUESTS as usize);
    text.push_str(trace::INPUT_HEADER);
    text.push('\n');
    for i in 0..REQUESTS {
        writeln!(text, "{},user-{},1", i * 1_000, i % KEYS).unwrap();
    }
    text
}

fn replay_throughput(c: &mut Criterion) {
    let input = generated_trace();
    let quota = Quota::per_second(100_000)
        .unwrap()
        .with_burst(1_000)
        .unwrap();
    let mut group = c.benchmark_group("replay_1m");
    group.throughput(Throughput::Elements(REQUESTS));
    group.sample_size(10);
    for algorithm in Algorithm::ALL {
        group.bench_function(algorithm.name(), |b| {
            b.iter(|| {
                let out = BufWriter::with_capacity(256 * 1024, io::sink());
                let summary =
                    trace::replay(Limit::new(algorithm, quota), input.as_bytes(), out).unwrap();
                assert_eq!(summary.requests, REQUESTS);
                summary
            })
        });
    }
    group.finish();
}

criterion_group!(benches, replay_throughput);
criterion_main!(benches);
