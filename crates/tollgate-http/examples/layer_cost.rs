//! The layer's instructions per request, for callgrind (deterministic
//! whatever else the machine runs): the criterion bench's layer and
//! requests (`benches/layer_setup`), every key seen once, then `REQUESTS`
//! more through `measured`, the only function callgrind is told to count.
//!
//! ```sh
//! cargo build --release -p tollgate-http --example layer_cost
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*layer_cost*measured*' \
//!     target/release/examples/layer_cost RULES admitting|refusing on|off REQUESTS
//! ```
//!
//! Instructions per request: callgrind's total (`Collected`) over `REQUESTS`.
//!
//! `ab` instead of `on|off` times the summaries' share on a quiet machine:
//! both layers side by side in this one thread, `REQUESTS` requests through
//! each in turn (the first of the two alternating), 31 rounds; it prints the
//! median time per request of each and the median of the rounds' ratios, so
//! that a drift of the machine's speed hits both alike.
//!
//! ```sh
//! target/release/examples/layer_cost 3 admitting ab 20000
//! ```

use std::time::Instant;

use tower::{Layer, ServiceExt};

#[path = "../benches/layer_setup/mod.rs"]
mod layer_setup;

use layer_setup::{handler, layer, request, KEYS};

/// `requests` requests through `svc`, from client `from` on.
#[inline(never)]
fn measured<S>(runtime: &tokio::runtime::Runtime, svc: &S, from: u32, requests: u32)
where
    S: tower::Service<http::Request<()>> + Clone,
    S::Error: std::fmt::Debug,
{
    for i in from..from + requests {
        let response = runtime.block_on(svc.clone().oneshot(request(i)));
        std::hint::black_box(response.unwrap());
    }
}

/// Rounds of the `ab` comparison.
const ROUNDS: u32 = 31;

/// The summaries on against off, timed in alternating turns (see the
/// module docs).
fn ab(runtime: &tokio::runtime::Runtime, rules: usize, refuse: bool, requests: u32) {
    let on = layer(rules, refuse, true).layer(handler());
    let off = layer(rules, refuse, false).layer(handler());
    for k in 0..KEYS {
        runtime.block_on(on.clone().oneshot(request(k))).unwrap();
        runtime.block_on(off.clone().oneshot(request(k))).unwrap();
    }
    let per_request = |turn: &dyn Fn()| {
        let start = Instant::now();
        turn();
        start.elapsed().as_nanos() as f64 / f64::from(requests)
    };
    let (mut ons, mut offs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let from = KEYS + round * requests;
        let time_on = || measured(runtime, &on, from, requests);
        let time_off = || measured(runtime, &off, from, requests);
        let (a, b) = if round % 2 == 0 {
            let a = per_request(&time_on);
            (a, per_request(&time_off))
        } else {
            let b = per_request(&time_off);
            (per_request(&time_on), b)
        };
        ons.push(a);
        offs.push(b);
        ratios.push(a / b);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (on, off, ratio) = (median(&mut ons), median(&mut offs), median(&mut ratios));
    println!(
        "{rules} rule(s) {}: summary on {on:.0} ns, off {off:.0} ns per request; \
         on/off median of {ROUNDS} rounds {:+.1}% (rounds from {:+.1}% to {:+.1}%)",
        if refuse { "refusing" } else { "admitting" },
        100.0 * (ratio - 1.0),
        100.0 * (ratios[0] - 1.0),
        100.0 * (ratios[ratios.len() - 1] - 1.0),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [rules, outcome, summaries, requests] = args.as_slice() else {
        eprintln!("usage: layer_cost RULES admitting|refusing on|off|ab REQUESTS");
        std::process::exit(2);
    };
    let parsed = (
        rules.parse::<usize>(),
        outcome.as_str(),
        summaries.as_str(),
        requests.parse::<u32>(),
    );
    let (Ok(rules), "admitting" | "refusing", "on" | "off" | "ab", Ok(requests)) = parsed else {
        eprintln!("usage: layer_cost RULES admitting|refusing on|off|ab REQUESTS (numbers)");
        std::process::exit(2);
    };
    let refuse = outcome == "refusing";
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if summaries == "ab" {
        ab(&runtime, rules, refuse, requests);
        return;
    }
    let summaries = summaries == "on";
    let svc = layer(rules, refuse, summaries).layer(handler());
    for k in 0..KEYS {
        runtime.block_on(svc.clone().oneshot(request(k))).unwrap();
    }
    measured(&runtime, &svc, KEYS, requests);
}
