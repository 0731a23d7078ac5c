//! The accuracy study at a reduced size, through the code path the full run
//! uses, checked against a brute-force count of the same traffic.

use tollgate_sim::metrics::Charge;
use tollgate_sim::report::Details;
use tollgate_sim::scenarios::accuracy::{self, Config, LIMIT};
use tollgate_sim::traffic::{KeyMix, Shape};
use tollgate_sim::Progress;

const PERIOD: u64 = 60_000_000_000;

/// Measurement-mode verdicts from the definitions: the log's count is
/// every request in `(t - 60 s, t]` up to this one; the counter's estimate
/// weighs the previous aligned minute by the share of it still in range.
fn brute_force(times: &[u64]) -> (u64, u64) {
    let (mut allowed, mut limited) = (0, 0);
    for (i, &t) in times.iter().enumerate() {
        let seen = &times[..=i];
        let exact = seen.iter().filter(|&&s| s + PERIOD > t).count() as u64;
        let window = t / PERIOD;
        let prev = seen.iter().filter(|&&s| s / PERIOD + 1 == window).count() as u128;
        let curr = seen.iter().filter(|&&s| s / PERIOD == window).count() as u128;
        let weight = (PERIOD - t % PERIOD) as u128;
        let fits_counter = prev * weight + curr * PERIOD as u128 <= LIMIT as u128 * PERIOD as u128;
        match (exact <= LIMIT, fits_counter) {
            (false, true) => allowed += 1,
            (true, false) => limited += 1,
            _ => {}
        }
    }
    (allowed, limited)
}

#[test]
fn measurement_mode_matches_the_definitions() {
    for shape in Shape::ALL {
        let mix = KeyMix {
            keys: 12,
            min_per_min: 60.0,
            max_per_min: 180.0,
            duration_s: 200.0,
            shape,
            seed: 3,
        };
        let mut buffer: Vec<Charge> = Vec::new();
        let mut wrong = 0;
        for k in 0..mix.keys {
            let times: Vec<u64> = mix.key(k).1.collect();
            let r = accuracy::run_key(&mix, k, &mut buffer);
            assert_eq!(r.requests, times.len() as u64);
            let (allowed, limited) = brute_force(&times);
            assert_eq!(
                (r.wrongly_allowed, r.wrongly_limited),
                (allowed, limited),
                "{shape:?} key {k}"
            );
            wrong += allowed + limited;
        }
        // Keys near the limit are sometimes judged wrongly: the test must
        // exercise disagreements, not only agreements.
        assert!(wrong > 0, "{shape:?}");
    }
}

struct Count(std::sync::atomic::AtomicU64);

impl Progress for Count {
    fn advance(&self, units: u64) {
        self.0
            .fetch_add(units, std::sync::atomic::Ordering::Relaxed);
    }
}

#[test]
fn reduced_study_is_deterministic_and_plausible() {
    let config = Config {
        keys: 200,
        runs: 2,
        ..Config::PUBLISHED
    };
    let progress = Count(Default::default());
    let first = accuracy::run(&config, &progress);
    assert_eq!(progress.0.into_inner(), config.work());
    let second = accuracy::run(&config, &());
    let json = |s: &tollgate_sim::scenarios::Scenario| serde_json::to_string(&s.report).unwrap();
    assert_eq!(json(&first), json(&second));
    let Details::Accuracy(a) = &first.report.details else {
        panic!("accuracy details");
    };
    for s in &a.shapes {
        // 200 keys at 160 a minute on average for 6.5 minutes.
        let expected = 200.0 * 160.0 * 6.5;
        assert!(
            (s.requests_per_run - expected).abs() < expected * 0.1,
            "{}",
            s.requests_per_run
        );
        assert!(s.wrong_percent > 0.0 && s.wrong_percent < 50.0);
        // The counter does overshoot, but never by 2x on this traffic.
        assert!(
            s.worst_key() > LIMIT && s.worst_key() < 2 * LIMIT,
            "{}",
            s.worst_key()
        );
        let binned: u64 = s.by_rate.iter().map(|b| b.keys).sum();
        assert_eq!(binned, 400);
    }
    // Uniform keys far below the limit never get 100 through in a minute.
    let uniform = &a.shapes[0];
    assert_eq!(uniform.by_rate[0].keys_over_percent, 0.0);
}
