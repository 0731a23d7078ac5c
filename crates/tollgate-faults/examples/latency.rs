//! Decision latency through `Resilient` over a real Redis (started here on
//! a free port): healthy, paused with `SIGSTOP` (breaker still closed, then
//! open) and killed. Prints p50/p99 per state, for `docs/PERFORMANCE.md`:
//!
//! ```text
//! cargo run --release -p tollgate-faults --example latency
//! ```

use std::time::{Duration, Instant};

use tollgate::{
    Algorithm, Backend, BackendExt, BreakerConfig, FailurePolicy, Limit, OnStoreError, Policy,
    Quota, Resilient,
};
use tollgate_redis::harness::RedisServer;
use tollgate_redis::RedisConfig;

fn percentiles(mut ns: Vec<u64>) -> (u64, u64) {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

fn show(state: &str, calls: usize, (p50, p99): (u64, u64)) {
    let f = |ns: u64| {
        if ns >= 1_000_000 {
            format!("{:.1} ms", ns as f64 / 1e6)
        } else if ns >= 1_000 {
            format!("{:.1} us", ns as f64 / 1e3)
        } else {
            format!("{ns} ns")
        }
    };
    println!("| {state} | {calls} | {} | {} |", f(p50), f(p99));
}

async fn measure<B: Backend>(backend: &B, policy: &B::Prepared, calls: usize) -> (u64, u64) {
    let mut ns = Vec::with_capacity(calls);
    for i in 0..calls {
        let key = format!("k{}", i % 100);
        let start = Instant::now();
        let _ = backend.check(&key, policy, 1).await;
        ns.push(start.elapsed().as_nanos() as u64);
    }
    percentiles(ns)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut server = RedisServer::start()?;
    let policy = Policy::new(Limit::new(Algorithm::Gcra, Quota::per_second(1_000_000)?));
    let redis = || async {
        RedisConfig::new(server.url())
            .timeout(Duration::from_secs(5))
            .connect()
            .await
    };
    let failure = FailurePolicy::new(OnStoreError::Open);
    // Never opens: every call waits for its deadline.
    let closed = Resilient::builder(redis().await?)
        .breaker(BreakerConfig::default().consecutive(0).failure_ratio(
            2.0,
            1,
            Duration::from_secs(1),
        ))
        .default_policy(failure)
        .build();
    // Opens after 5 failures and stays open for the run.
    let opening = Resilient::builder(redis().await?)
        .breaker(
            BreakerConfig::default()
                .consecutive(5)
                .open_for(Duration::from_secs(3600)),
        )
        .default_policy(failure)
        .build();
    let (on_closed, on_opening) = (closed.prepare(&policy)?, opening.prepare(&policy)?);
    println!("| store | calls | p50 | p99 |\n|---|---|---|---|");
    measure(&closed, &on_closed, 2_000).await; // warm-up
    show(
        "healthy",
        20_000,
        measure(&closed, &on_closed, 20_000).await,
    );

    server.pause()?;
    show(
        "paused, breaker closed (deadline 50 ms)",
        40,
        measure(&closed, &on_closed, 40).await,
    );
    measure(&opening, &on_opening, 5).await;
    show(
        "paused, breaker open",
        100_000,
        measure(&opening, &on_opening, 100_000).await,
    );
    server.kill();
    show(
        "down (killed), breaker closed",
        200,
        measure(&closed, &on_closed, 200).await,
    );
    show(
        "down (killed), breaker open",
        100_000,
        measure(&opening, &on_opening, 100_000).await,
    );
    Ok(())
}
