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

use tower::{Layer, ServiceExt};

#[path = "../benches/layer_setup/mod.rs"]
mod layer_setup;

use layer_setup::{handler, layer, request, KEYS};

/// `requests` requests through `svc`, from client `KEYS` on.
#[inline(never)]
fn measured<S>(runtime: &tokio::runtime::Runtime, svc: &S, requests: u32)
where
    S: tower::Service<http::Request<()>> + Clone,
    S::Error: std::fmt::Debug,
{
    for i in 0..requests {
        let response = runtime.block_on(svc.clone().oneshot(request(KEYS + i)));
        std::hint::black_box(response.unwrap());
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [rules, outcome, summaries, requests] = args.as_slice() else {
        eprintln!("usage: layer_cost RULES admitting|refusing on|off REQUESTS");
        std::process::exit(2);
    };
    let parsed = (
        rules.parse::<usize>(),
        outcome.as_str(),
        summaries.as_str(),
        requests.parse::<u32>(),
    );
    let (Ok(rules), "admitting" | "refusing", "on" | "off", Ok(requests)) = parsed else {
        eprintln!("usage: layer_cost RULES admitting|refusing on|off REQUESTS (numbers)");
        std::process::exit(2);
    };
    let refuse = outcome == "refusing";
    let summaries = summaries == "on";
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let svc = layer(rules, refuse, summaries).layer(handler());
    for k in 0..KEYS {
        runtime.block_on(svc.clone().oneshot(request(k))).unwrap();
    }
    measured(&runtime, &svc, requests);
}
