//! Sends a trace through one rule of the core, key by key, and records what
//! the experiments measure. Every decision is `tollgate_core::State::decide`.

use std::collections::HashMap;

use tollgate_core::{Algorithm, Limit, Quota, State};

use crate::metrics::Charge;
use crate::traffic::Request;

/// What one rule did with a trace.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Requests seen.
    pub requests: u64,
    /// Whether each request, in trace order, was admitted.
    pub verdicts: Vec<bool>,
    /// Admitted requests at their arrival times (trace order).
    pub admitted: Vec<Charge>,
    /// Admitted requests at the time the protected service sees them, in
    /// time order: arrival plus the queue's delay (the arrival for every
    /// algorithm but `leaky_queue`).
    pub released: Vec<Charge>,
    /// Each admitted request's delay, ns.
    pub waits: Vec<u64>,
    /// The largest per-key state seen after any decision, bytes.
    pub max_state_bytes: usize,
}

impl Outcome {
    /// Admitted cost.
    pub fn admitted_cost(&self) -> u64 {
        self.admitted.iter().map(|c| c.cost).sum()
    }

    /// Requests refused.
    pub fn rejected(&self) -> u64 {
        self.verdicts.iter().filter(|v| !**v).count() as u64
    }
}

/// Runs `trace` (in time order) through `limit`, every key on its own state.
pub fn run(limit: &Limit, trace: &[Request]) -> Outcome {
    let mut keys: HashMap<u32, State> = HashMap::new();
    let mut out = Outcome {
        requests: trace.len() as u64,
        verdicts: Vec::with_capacity(trace.len()),
        ..Outcome::default()
    };
    for r in trace {
        let state = keys
            .entry(r.key)
            .or_insert_with(|| State::new(limit.algorithm, &limit.quota));
        let d = state.decide(&limit.quota, r.at, r.cost);
        out.verdicts.push(d.allowed);
        if d.allowed && r.cost > 0 {
            out.admitted.push(Charge {
                at: r.at,
                cost: r.cost,
            });
            out.released.push(Charge {
                at: r.at + d.delay,
                cost: r.cost,
            });
            out.waits.push(d.delay);
        }
        out.max_state_bytes = out.max_state_bytes.max(state.memory_bytes());
    }
    out.released.sort_unstable();
    out
}

/// A rule with the label reports give it, e.g. `token_bucket (burst 20)`.
#[derive(Clone, Copy, Debug)]
pub struct Lane {
    /// The rule.
    pub limit: Limit,
    /// Whether the label names the burst (only for algorithms that use one).
    pub show_burst: bool,
}

impl Lane {
    /// `algorithm` under `quota`; `show_burst` puts the burst in the label,
    /// for scenarios that compare several bursts.
    pub fn new(algorithm: Algorithm, quota: Quota, show_burst: bool) -> Self {
        Lane {
            limit: Limit::new(algorithm, quota),
            show_burst,
        }
    }

    /// The label used in tables and charts.
    pub fn label(&self) -> String {
        let a = self.limit.algorithm;
        if self.show_burst && a.uses_burst() {
            format!("{} (burst {})", a.name(), self.limit.quota.burst())
        } else {
            a.name().to_string()
        }
    }
}
