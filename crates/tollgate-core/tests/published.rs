//! The published cases named in the core issue, with exact numbers.

use tollgate_core::{Algorithm, Quota, RetryAfter, State};

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

/// Admitted count per batch, each batch of `n` requests at one instant.
fn batches(algorithm: Algorithm, quota: &Quota, at: &[u64], n: u64) -> Vec<u64> {
    let mut state = State::new(algorithm, quota);
    at.iter()
        .map(|&t| (0..n).filter(|_| state.decide(quota, t, 1).allowed).count() as u64)
        .collect()
}

#[test]
fn three_batches_across_a_minute_boundary() {
    let quota = Quota::per_minute(100).unwrap();
    let at = [59 * S + 500 * MS, 60 * S + 500 * MS, 91 * S];
    let expect = [
        (Algorithm::FixedWindow, [100, 100, 0]),
        (Algorithm::SlidingLog, [100, 0, 0]),
        (Algorithm::SlidingCounter, [100, 0, 51]),
        (Algorithm::TokenBucket, [100, 1, 51]),
        (Algorithm::Gcra, [100, 1, 51]),
        (Algorithm::LeakyBucket, [100, 1, 51]),
    ];
    for (algorithm, want) in expect {
        assert_eq!(batches(algorithm, &quota, &at, 100), want, "{algorithm}");
    }
}

#[test]
fn leaky_queue_smooths_a_boundary_burst() {
    let quota = Quota::per_minute(100).unwrap().with_burst(20).unwrap();
    let mut state = State::new(Algorithm::LeakyQueue, &quota);
    let arrivals = (0..200).map(|i| 59 * S + 500 * MS + i * 5 * MS);
    let mut releases = Vec::new();
    let mut longest = 0;
    for t in arrivals {
        let d = state.decide(&quota, t, 1);
        if d.allowed {
            releases.push(t + d.delay);
            longest = longest.max(d.delay);
        } else {
            assert!(matches!(d.retry_after, RetryAfter::After(_)));
        }
    }
    assert_eq!(releases.len(), 22);
    assert_eq!(longest, 12 * S);
    let most_in_a_second = releases
        .iter()
        .map(|&a| releases.iter().filter(|&&b| b >= a && b < a + S).count())
        .max()
        .unwrap();
    assert_eq!(most_in_a_second, 2);
}
