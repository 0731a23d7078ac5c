//! The three layered rules both overhead benchmarks put in front of the
//! same route (shared by `benches/layer.rs` and `examples/bench_server.rs`).

use tollgate::{Algorithm, Limit, Quota};
use tollgate_http::{Key, Matcher, Rule};

/// Per client address, per API key on `/v1`, per API key and endpoint (a
/// composite with a constant: the criterion bench has no router to match a
/// route); each
/// far more generous than the traffic (`refuse` false), or one request an
/// hour per key (`refuse` true).
pub fn rules(refuse: bool) -> [Rule; 3] {
    let quota = if refuse {
        Quota::per_hour(1).unwrap()
    } else {
        Quota::per_second(1_000_000).unwrap()
    };
    [
        Rule::new("per-ip", Limit::new(Algorithm::Gcra, quota)).key(Key::ip()),
        Rule::new("per-key", Limit::new(Algorithm::TokenBucket, quota))
            .matcher(Matcher::any().path_prefix("/v1"))
            .key(Key::header("x-api-key")),
        Rule::new("per-endpoint", Limit::new(Algorithm::SlidingCounter, quota))
            .key(Key::all([Key::header("x-api-key"), Key::constant("items")])),
    ]
}
