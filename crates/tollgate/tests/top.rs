//! The heavy-hitter summary's guarantees, against exact counts of random
//! streams: reported counts within the stated error, every key above the
//! error bound reported, memory bounded by `k` per sub-window and stripe,
//! old sub-windows leaving the window, and stripes (one per recording
//! thread) merged without loosening any bound.

use std::collections::HashMap;

use proptest::prelude::*;
use tollgate::top::{Counts, HeavyHitters, Hit, TopConfig};

const SUB: u64 = 1_000;
const SUB_WINDOWS: usize = 4;

/// One hit of a stream: when, whose, what, how many, and the stripe (the
/// recording thread's number) it goes to.
#[derive(Clone, Debug)]
struct Event {
    at: u64,
    key: u16,
    hit: Hit,
    hits: u64,
    stripe: usize,
}

fn hit() -> impl Strategy<Value = Hit> {
    prop_oneof![
        Just(Hit::Admitted),
        Just(Hit::Refused),
        Just(Hit::ShadowRefused)
    ]
}

/// Streams of a few heavy keys among many light ones, in time order over
/// up to ten sub-windows (so some fall out of the ring).
fn stream() -> impl Strategy<Value = Vec<Event>> {
    let key = prop_oneof![3 => 0u16..4, 2 => 0u16..2000];
    prop::collection::vec((0u64..10 * SUB, key, hit(), 1u64..5, 0usize..8), 1..600).prop_map(
        |mut v| {
            v.sort_by_key(|e| e.0);
            v.into_iter()
                .map(|(at, key, hit, hits, stripe)| Event {
                    at,
                    key,
                    hit,
                    hits,
                    stripe,
                })
                .collect()
        },
    )
}

fn add(counts: &mut Counts, hit: Hit, hits: u64) {
    match hit {
        Hit::Admitted => counts.admitted += hits,
        Hit::Refused => counts.refused += hits,
        Hit::ShadowRefused => counts.shadow_refused += hits,
    }
}

proptest! {
    #[test]
    fn reports_are_within_the_stated_error(
        events in stream(),
        capacity in 1usize..12,
        window_subs in 1u64..=SUB_WINDOWS as u64,
        stripes in 1usize..=4,
    ) {
        let config = TopConfig::new(capacity, SUB, SUB_WINDOWS).unwrap().stripes(stripes);
        let top = HeavyHitters::new(config);
        for e in &events {
            top.record_on(e.stripe, e.at, &e.key.to_string(), e.hit, e.hits);
            prop_assert!(top.tracked() <= capacity * SUB_WINDOWS * config.stripe_count());
        }
        let now = events.last().unwrap().at;
        let oldest = (now / SUB).saturating_sub(window_subs - 1);
        // The truth: what fell in the window's sub-windows.
        let mut truth: HashMap<String, Counts> = HashMap::new();
        let mut totals = Counts::default();
        for e in events.iter().filter(|e| e.at / SUB >= oldest) {
            add(truth.entry(e.key.to_string()).or_default(), e.hit, e.hits);
            add(&mut totals, e.hit, e.hits);
        }
        let report = top.report(now, window_subs * SUB, usize::MAX);
        prop_assert_eq!(report.totals, totals);
        prop_assert!(report.error_bound <= totals.total() / capacity as u64);
        prop_assert!(
            report.keys.len() <= capacity * window_subs as usize * config.stripe_count()
        );
        let reported: HashMap<&str, _> =
            report.keys.iter().map(|k| (k.key.as_str(), k)).collect();
        for (key, true_counts) in &truth {
            let true_hits = true_counts.total();
            match reported.get(key.as_str()) {
                Some(k) => {
                    prop_assert!(k.hits >= true_hits, "{key}: {} < {true_hits}", k.hits);
                    prop_assert!(k.hits - k.error <= true_hits);
                    prop_assert!(k.error <= report.error_bound);
                    prop_assert!(k.counts.admitted <= true_counts.admitted);
                    prop_assert!(k.counts.refused <= true_counts.refused);
                    prop_assert!(k.counts.shadow_refused <= true_counts.shadow_refused);
                    prop_assert!(true_counts.refused <= k.counts.refused + k.error);
                }
                None => prop_assert!(
                    true_hits <= report.error_bound,
                    "{key} has {true_hits} hits, above the bound {}, and is missing",
                    report.error_bound
                ),
            }
        }
        // Nothing from before the window is reported.
        for k in &report.keys {
            prop_assert!(truth.contains_key(&k.key), "{} is not in the window", k.key);
        }
    }
}

#[test]
fn heavy_hitters_among_many_distinct_keys_are_named() {
    let config = TopConfig::new(50, SUB, SUB_WINDOWS).unwrap().stripes(1);
    let top = HeavyHitters::new(config);
    for i in 0..100_000u64 {
        let at = i * SUB / 100_000;
        top.record(at, &format!("light-{i}"), Hit::Admitted, 1);
        if i % 10 == 0 {
            top.record(at, "heavy-a", Hit::Refused, 1);
        }
        if i % 20 == 0 {
            top.record(at, "heavy-b", Hit::ShadowRefused, 1);
        }
    }
    assert!(top.tracked() <= 50);
    let report = top.report(SUB - 1, SUB, 2);
    let names: Vec<_> = report.keys.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(names, ["heavy-a", "heavy-b"]);
    assert!(report.error_bound <= report.totals.total() / 50);
    let a = &report.keys[0];
    assert!(a.hits >= 10_000 && a.hits - a.error <= 10_000);
}

#[test]
fn threads_recording_side_by_side_are_merged_within_the_bound() {
    let config = TopConfig::new(50, SUB, SUB_WINDOWS).unwrap().stripes(4);
    let top = HeavyHitters::new(config);
    // Four threads, each its own light keys and a share of the same heavy
    // one: 4 × 25,000 light hits and 4 × 2,500 heavy ones.
    std::thread::scope(|scope| {
        for thread in 0..4u64 {
            let top = &top;
            scope.spawn(move || {
                for i in 0..25_000u64 {
                    let at = i * SUB / 25_000;
                    top.record(at, &format!("light-{thread}-{i}"), Hit::Admitted, 1);
                    if i % 10 == 0 {
                        top.record(at, "heavy", Hit::Refused, 1);
                    }
                }
            });
        }
    });
    assert!(top.tracked() <= 50 * 4);
    let report = top.report(SUB - 1, SUB, 1);
    assert_eq!(report.totals.admitted, 100_000);
    assert_eq!(report.totals.refused, 10_000);
    assert!(report.error_bound <= report.totals.total() / 50);
    let heavy = &report.keys[0];
    assert_eq!(heavy.key, "heavy");
    assert!(heavy.hits >= 10_000 && heavy.hits - heavy.error <= 10_000);
    assert!(heavy.error <= report.error_bound);
}
