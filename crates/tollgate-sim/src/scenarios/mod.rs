//! The published experiments, one module each, by the name
//! `tollgate simulate NAME` takes.

pub mod accuracy;
pub mod adversarial;
pub mod batches;
pub mod batching;
pub mod boundary_burst;
pub mod equivalence;
pub mod retry_storm;
pub mod seed004;

use std::fmt;
use std::str::FromStr;

use tollgate_core::{Algorithm, Quota};

use crate::charts::Chart;
use crate::report::{Row, ScenarioReport};
use crate::run::{run, Lane, Outcome};
use crate::traffic::Request;
use crate::Progress;

/// A scenario's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Name {
    /// Seed 000's boundary burst and steady overload.
    BoundaryBurst,
    /// Seed 001's three batches.
    Batches,
    /// Seed 002's two bursts 1.1 s apart.
    Adversarial,
    /// Seed 004's pattern A.
    Poisson,
    /// Seed 004's pattern B.
    BurstAfterIdle,
    /// Seed 004's pattern C.
    BoundaryAttack,
    /// Token bucket, GCRA and leaky meter compared decision by decision.
    Equivalence,
    /// Seed 000's many-keys study of the sliding counter.
    Accuracy,
    /// Seed 002's batched reservations: store load against overshoot.
    Batching,
    /// Four ways to retry into a limited server whose capacity dips.
    RetryStorm,
}

impl Name {
    /// Every scenario, in the order `tollgate simulate` runs them.
    pub const ALL: [Name; 10] = [
        Name::BoundaryBurst,
        Name::Batches,
        Name::Adversarial,
        Name::Poisson,
        Name::BurstAfterIdle,
        Name::BoundaryAttack,
        Name::Equivalence,
        Name::Accuracy,
        Name::Batching,
        Name::RetryStorm,
    ];

    /// The command-line name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Name::BoundaryBurst => "boundary-burst",
            Name::Batches => "batches",
            Name::Adversarial => "adversarial",
            Name::Poisson => "poisson",
            Name::BurstAfterIdle => "burst-after-idle",
            Name::BoundaryAttack => "boundary-attack",
            Name::Equivalence => "equivalence",
            Name::Accuracy => "accuracy",
            Name::Batching => "batching",
            Name::RetryStorm => "retry-storm",
        }
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error for a scenario name that does not exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownScenario(pub String);

impl fmt::Display for UnknownScenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Name::ALL.iter().map(|n| n.as_str()).collect();
        write!(
            f,
            "unknown scenario `{}`; expected one of: {}",
            self.0,
            names.join(", ")
        )
    }
}

impl std::error::Error for UnknownScenario {}

impl FromStr for Name {
    type Err = UnknownScenario;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase().replace('_', "-");
        Name::ALL
            .into_iter()
            .find(|n| n.as_str() == wanted)
            .ok_or_else(|| UnknownScenario(s.to_string()))
    }
}

/// Settings that change what a scenario computes (only the accuracy study
/// has any: its size).
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// The accuracy study's size.
    pub accuracy: accuracy::Config,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            accuracy: accuracy::Config::PUBLISHED,
        }
    }
}

/// A scenario's report and the charts that go with it.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The numbers.
    pub report: ScenarioReport,
    /// Chart data, rendered by [`crate::charts`].
    pub charts: Vec<Chart>,
}

impl Name {
    /// Units of work, for a progress bar: 1 per small scenario.
    pub fn work(self, options: &Options) -> u64 {
        match self {
            Name::Accuracy => options.accuracy.work(),
            _ => 1,
        }
    }

    /// Runs the scenario.
    pub fn run(self, options: &Options, progress: &dyn Progress) -> Scenario {
        let scenario = match self {
            Name::BoundaryBurst => boundary_burst::run(),
            Name::Batches => batches::run(),
            Name::Adversarial => adversarial::run(),
            Name::Poisson => seed004::poisson(),
            Name::BurstAfterIdle => seed004::burst_after_idle(),
            Name::BoundaryAttack => seed004::boundary_attack(),
            Name::Equivalence => equivalence::run(),
            Name::Batching => batching::run_scenario(),
            Name::Accuracy => return accuracy::run(&options.accuracy, progress),
            Name::RetryStorm => retry_storm::run(),
        };
        progress.advance(1);
        scenario
    }
}

/// The rules most scenarios compare: the three windows at `limit` per
/// `period`, then the bucket family at each of `bursts`, then the queue.
pub(crate) fn lanes(windows: Quota, bursts: &[u64], queue_burst: u64) -> Vec<Lane> {
    let with_burst = |b: u64| windows.with_burst(b).expect("scenario quotas are valid");
    let show = bursts.len() > 1 || bursts != [windows.limit()];
    let mut out: Vec<Lane> = [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingCounter,
    ]
    .into_iter()
    .map(|a| Lane::new(a, windows, false))
    .collect();
    for &b in bursts {
        for a in [
            Algorithm::TokenBucket,
            Algorithm::Gcra,
            Algorithm::LeakyBucket,
        ] {
            out.push(Lane::new(a, with_burst(b), show));
        }
    }
    out.push(Lane::new(
        Algorithm::LeakyQueue,
        with_burst(queue_burst),
        true,
    ));
    out
}

/// Runs `trace` through every lane.
pub(crate) fn measure(lanes: &[Lane], trace: &[Request]) -> (Vec<Row>, Vec<Outcome>) {
    let outcomes: Vec<Outcome> = lanes.iter().map(|l| run(&l.limit, trace)).collect();
    let rows = lanes
        .iter()
        .zip(&outcomes)
        .map(|(l, o)| Row::measure(l, o))
        .collect();
    (rows, outcomes)
}

/// The row labelled `label` (scenarios look up their own lanes).
pub(crate) fn row<'a>(rows: &'a [Row], label: &str) -> &'a Row {
    rows.iter()
        .find(|r| r.label == label)
        .unwrap_or_else(|| panic!("scenario has no lane `{label}`"))
}

/// Requests at the given times, cost 1, key 0.
pub(crate) fn requests(times: impl IntoIterator<Item = u64>) -> Vec<Request> {
    times.into_iter().map(Request::at).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for n in Name::ALL {
            assert_eq!(n.as_str().parse::<Name>(), Ok(n));
        }
        assert_eq!("Boundary_Burst".parse::<Name>(), Ok(Name::BoundaryBurst));
        let err = "nope".parse::<Name>().unwrap_err().to_string();
        assert!(err.contains("boundary-burst"), "{err}");
    }
}
