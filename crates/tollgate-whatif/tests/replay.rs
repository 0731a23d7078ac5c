//! Exactness: what-if makes the decisions `tollgate replay` makes on the
//! trace converted from the same log, for every algorithm.

mod common;

use std::collections::HashMap;

use common::{options, MINUTE};
use proptest::prelude::*;
use tollgate_core::{Algorithm, Limit, Quota};
use tollgate_http::Key;
use tollgate_whatif::engine;
use tollgate_whatif::policy::Candidates;

/// Refused requests per key when `tollgate replay` decides `trace`.
fn replay_refusals(limit: Limit, trace: &[u8]) -> HashMap<String, (u64, u64)> {
    let mut out = Vec::new();
    tollgate_trace::trace::replay(limit, trace, &mut out).unwrap();
    let mut per_key: HashMap<String, (u64, u64)> = HashMap::new();
    for line in String::from_utf8(out).unwrap().lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let e = per_key.entry(f[1].to_string()).or_default();
        e.0 += 1;
        e.1 += u64::from(f[3] == "0");
    }
    per_key
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn decisions_equal_replay_on_the_converted_trace(
        seed in 0u64..1_000,
        algorithm in 0usize..7,
        limit in 1u64..40,
        burst in 1u64..30,
        period_s in prop::sample::select(vec![1u64, 10, 60]),
        workers in 1usize..4,
    ) {
        let algorithm = Algorithm::ALL[algorithm];
        let mut log = Vec::new();
        tollgate_whatif::sample::generate(seed, 4_000, &mut log).unwrap();
        let period = period_s * 1_000_000_000;
        let candidates = Candidates::sweep(algorithm, period, &[limit], &[burst], Key::ip()).unwrap();
        let mut opts = options("combined-xff", &["10.0.0.0/8"]);
        opts.workers = workers;
        let mut trace = Vec::new();
        let outcome = engine::run_with_trace(&log[..], &candidates, &opts, Some(&mut trace), &mut || {}).unwrap();
        // The sample is out of order by up to two seconds: the key's clock
        // rule is exercised.
        let lane = &outcome.lanes[0];
        let ours: HashMap<String, (u64, u64)> = lane
            .keys
            .iter()
            .map(|k| (String::from_utf8(k.key.to_vec()).unwrap(), (k.volume, k.policies[0].refused)))
            .collect();
        let quota = Quota::with_parts(limit, period, burst).unwrap();
        let theirs = replay_refusals(Limit::new(algorithm, quota), &trace);
        prop_assert_eq!(&ours, &theirs);
        prop_assert_eq!(outcome.refused[0], theirs.values().map(|v| v.1).sum::<u64>());
        prop_assert!(lane.requests > 3_900);
    }
}

#[test]
fn the_sample_is_out_of_order() {
    let mut log = Vec::new();
    tollgate_whatif::sample::generate(1, 4_000, &mut log).unwrap();
    let candidates = Candidates::sweep(Algorithm::Gcra, MINUTE, &[10], &[1], Key::ip()).unwrap();
    let mut trace = Vec::new();
    engine::run_with_trace(
        &log[..],
        &candidates,
        &options("combined-xff", &[]),
        Some(&mut trace),
        &mut || {},
    )
    .unwrap();
    let times: Vec<u64> = String::from_utf8(trace)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect();
    assert!(times.windows(2).any(|w| w[1] < w[0]));
}
