//! Deterministic traffic: every generator is a pure function of its
//! parameters (and seed), so a scenario is the same trace on every run.
//!
//! Times are `u64` nanoseconds. Random generators accumulate arrival times in
//! `f64` seconds exactly as a Python harness would (`t += expovariate(rate)`,
//! stop at `t >= duration`), then convert each time once with
//! [`seconds_to_ns`], so the trace is the Python one rounded to the nearest
//! nanosecond and never drifts.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::rng::PyRandom;

/// Nanoseconds in a second.
pub const NS_PER_S: u64 = 1_000_000_000;
/// One millisecond in nanoseconds.
pub const MS: u64 = 1_000_000;

/// One request: when, whose budget, and how much it costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Request {
    /// Arrival time in nanoseconds.
    pub at: u64,
    /// The key (client) it is charged to.
    pub key: u32,
    /// Cost units (1 for a plain request).
    pub cost: u64,
}

impl Request {
    /// A cost-1 request for key 0 at `at`.
    pub const fn at(at: u64) -> Self {
        Request {
            at,
            key: 0,
            cost: 1,
        }
    }
}

/// `seconds` as nanoseconds, rounded to the nearest (ties away from zero).
pub fn seconds_to_ns(seconds: f64) -> u64 {
    (seconds * NS_PER_S as f64).round() as u64
}

/// `count` requests at one instant (a batch sent "all at once").
pub fn batch(at: u64, count: u64) -> impl Iterator<Item = u64> {
    (0..count).map(move |_| at)
}

/// `count` requests evenly spaced from `first` to `last` inclusive; the
/// i-th is at `first + (last - first) * i / (count - 1)` rounded down, so a
/// span that does not divide evenly still ends exactly at `last`.
pub fn spread(first: u64, last: u64, count: u64) -> impl Iterator<Item = u64> {
    let span = last.saturating_sub(first) as u128;
    let steps = count.saturating_sub(1).max(1) as u128;
    (0..count).map(move |i| first + (span * i as u128 / steps) as u64)
}

/// `count` requests one `step` apart, the first at `first`.
pub fn every(first: u64, step: u64, count: u64) -> impl Iterator<Item = u64> {
    spread(first, first + step * count.saturating_sub(1), count)
}

/// Poisson arrivals at `rate` per second in `[0, duration_s)` seconds:
/// `random.Random(seed).expovariate(rate)` gaps.
#[derive(Clone)]
pub struct Poisson {
    rng: PyRandom,
    rate: f64,
    t: f64,
    end: f64,
}

impl Poisson {
    /// Arrivals of `random.Random(seed)`.
    pub fn new(seed: u64, rate_per_s: f64, duration_s: f64) -> Self {
        Self::with_rng(PyRandom::new(seed), rate_per_s, duration_s)
    }

    /// Arrivals drawn from an existing generator (which it takes over).
    pub fn with_rng(rng: PyRandom, rate_per_s: f64, duration_s: f64) -> Self {
        Poisson {
            rng,
            rate: rate_per_s,
            t: 0.0,
            end: duration_s,
        }
    }
}

impl Iterator for Poisson {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        self.t += self.rng.expovariate(self.rate);
        (self.t < self.end).then(|| seconds_to_ns(self.t))
    }
}

/// On/off bursts: the source alternates between *on* spells, in which it
/// sends Poisson arrivals at `on_rate`, and silent *off* spells; spell
/// lengths are exponential with the given means. It starts on with the
/// long-run share of time spent on, so every instant looks alike.
///
/// With `on_rate = rate * (on_mean + off_mean) / on_mean` the long-run rate
/// is `rate`, but arrivals come in clumps instead of evenly.
#[derive(Clone)]
pub struct OnOff {
    rng: PyRandom,
    on_rate: f64,
    on_mean: f64,
    off_mean: f64,
    end: f64,
    /// The current time and the end of the current on spell.
    t: f64,
    spell_end: f64,
}

impl OnOff {
    /// On/off arrivals in `[0, duration_s)` seconds from `rng`.
    pub fn with_rng(
        mut rng: PyRandom,
        on_rate: f64,
        on_mean_s: f64,
        off_mean_s: f64,
        duration_s: f64,
    ) -> Self {
        let on_share = on_mean_s / (on_mean_s + off_mean_s);
        let t = if rng.random() < on_share {
            0.0
        } else {
            rng.expovariate(1.0 / off_mean_s)
        };
        let spell_end = t + rng.expovariate(1.0 / on_mean_s);
        OnOff {
            rng,
            on_rate,
            on_mean: on_mean_s,
            off_mean: off_mean_s,
            end: duration_s,
            t,
            spell_end,
        }
    }
}

impl Iterator for OnOff {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        loop {
            if self.t >= self.end {
                return None;
            }
            let next = self.t + self.rng.expovariate(self.on_rate);
            if next < self.spell_end {
                self.t = next;
                return (next < self.end).then(|| seconds_to_ns(next));
            }
            // The spell ended first; arrivals are memoryless, so the next
            // spell's arrivals can start afresh after the silence.
            self.t = self.spell_end + self.rng.expovariate(1.0 / self.off_mean);
            self.spell_end = self.t + self.rng.expovariate(1.0 / self.on_mean);
        }
    }
}

/// How each key of a [`KeyMix`] spreads its requests over time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// Poisson arrivals at the key's rate.
    Uniform,
    /// [`OnOff`] bursts: on a quarter of the time (spells of 10 s on average,
    /// 30 s off) at four times the key's rate, so the same long-run rate.
    Bursty,
}

impl Shape {
    /// Mean on spell, seconds.
    pub const ON_MEAN_S: f64 = 10.0;
    /// Mean off spell, seconds.
    pub const OFF_MEAN_S: f64 = 30.0;

    /// Both shapes, in report order.
    pub const ALL: [Shape; 2] = [Shape::Uniform, Shape::Bursty];

    /// The name used in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Shape::Uniform => "uniform",
            Shape::Bursty => "bursty",
        }
    }
}

/// Many keys, each with its own rate drawn from `[min, max]` per minute and
/// its own arrivals, all derived from one seed.
///
/// Key `k` under seed `s` uses `random.Random((s << 32) | k)`: its first
/// draw is its rate (`uniform(min, max)`), the rest its arrivals. Keys are
/// independent, so one key's traffic can be generated (and limited) without
/// the others'.
#[derive(Clone, Copy, Debug)]
pub struct KeyMix {
    /// Number of keys (`0..keys`).
    pub keys: u32,
    /// Lowest per-key rate, requests per minute.
    pub min_per_min: f64,
    /// Highest per-key rate, requests per minute.
    pub max_per_min: f64,
    /// Length of the trace in seconds.
    pub duration_s: f64,
    /// How arrivals are spread.
    pub shape: Shape,
    /// The run's seed.
    pub seed: u32,
}

impl KeyMix {
    /// Key `key`'s rate (per minute) and its arrivals in ns.
    pub fn key(&self, key: u32) -> (f64, Box<dyn Iterator<Item = u64> + Send>) {
        let mut rng = PyRandom::new(((self.seed as u64) << 32) | key as u64);
        let per_min = rng.uniform(self.min_per_min, self.max_per_min);
        let rate = per_min / 60.0;
        let arrivals: Box<dyn Iterator<Item = u64> + Send> = match self.shape {
            Shape::Uniform => Box::new(Poisson::with_rng(rng, rate, self.duration_s)),
            Shape::Bursty => {
                let (on, off) = (Shape::ON_MEAN_S, Shape::OFF_MEAN_S);
                let on_rate = rate * (on + off) / on;
                Box::new(OnOff::with_rng(rng, on_rate, on, off, self.duration_s))
            }
        };
        (per_min, arrivals)
    }

    /// Every key's requests merged into one trace in time order (ties by
    /// key), for replaying a small mix through a multi-key limiter.
    pub fn merged(&self) -> Vec<Request> {
        let mut streams: Vec<_> = (0..self.keys).map(|k| self.key(k).1).collect();
        let mut heap = BinaryHeap::new();
        for (k, s) in streams.iter_mut().enumerate() {
            if let Some(at) = s.next() {
                heap.push(Reverse((at, k as u32)));
            }
        }
        let mut out = Vec::new();
        while let Some(Reverse((at, key))) = heap.pop() {
            out.push(Request { at, key, cost: 1 });
            if let Some(next) = streams[key as usize].next() {
                heap.push(Reverse((next, key)));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_ends_exactly_at_last() {
        let v: Vec<u64> = spread(5 * NS_PER_S, 5 * NS_PER_S + 20 * MS, 30).collect();
        assert_eq!(v.len(), 30);
        assert_eq!(v[0], 5 * NS_PER_S);
        assert_eq!(v[29], 5 * NS_PER_S + 20 * MS);
        assert!(v.windows(2).all(|w| w[0] < w[1]));
        let one: Vec<u64> = spread(7, 100, 1).collect();
        assert_eq!(one, vec![7]);
    }

    #[test]
    fn every_is_evenly_spaced() {
        let v: Vec<u64> = every(59_500 * MS, 5 * MS, 100).collect();
        assert_eq!(v[1] - v[0], 5 * MS);
        assert_eq!(*v.last().unwrap(), 59_995 * MS);
    }

    #[test]
    fn rounding_to_ns_is_to_nearest() {
        assert_eq!(seconds_to_ns(0.1), 100_000_000);
        assert_eq!(seconds_to_ns(1e-9 * 0.5), 1);
        assert_eq!(seconds_to_ns(1e-9 * 0.49), 0);
    }

    #[test]
    fn on_off_keeps_the_long_run_rate() {
        let rate = 2.0;
        let (on, off) = (Shape::ON_MEAN_S, Shape::OFF_MEAN_S);
        let n = OnOff::with_rng(PyRandom::new(3), rate * (on + off) / on, on, off, 20_000.0).count()
            as f64;
        let expected = rate * 20_000.0;
        assert!((n - expected).abs() < expected * 0.1, "{n} vs {expected}");
    }

    #[test]
    fn merged_is_sorted_and_complete() {
        let mix = KeyMix {
            keys: 5,
            min_per_min: 60.0,
            max_per_min: 600.0,
            duration_s: 30.0,
            shape: Shape::Bursty,
            seed: 9,
        };
        let merged = mix.merged();
        assert!(merged
            .windows(2)
            .all(|w| (w[0].at, w[0].key) <= (w[1].at, w[1].key)));
        let total: usize = (0..5).map(|k| mix.key(k).1.count()).sum();
        assert_eq!(merged.len(), total);
    }
}
