//! One instance of a fleet hammering one hot key in Redis, for the
//! several-processes test and `docs/PERFORMANCE.md`.
//!
//! ```text
//! batch-worker URL BATCH RATE SECONDS LIMIT [TASKS]
//! ```
//!
//! Sends `RATE` requests a second (0: as fast as `TASKS` concurrent callers
//! can) for `SECONDS` to the key `hot-BATCH`, limited by a fixed window of
//! `LIMIT` per second. `BATCH` 1 asks the store for every request; more
//! leases that many units at a time through `tollgate::Batched`. Prints one
//! line `second UNIX_SECOND ADMITTED` per second seen, then `total
//! REQUESTS ADMITTED STORE_CALLS`.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::sync::Mutex;

use tokio::time::Instant;
use tollgate::{Algorithm, Backend, BackendExt, BatchConfig, Batched, Limit, Policy, Quota};
use tollgate_redis::RedisConfig;

/// Admitted requests per Unix second, and all requests, shared by the
/// caller tasks.
type Counts = Mutex<(BTreeMap<u64, u64>, u64)>;

struct Args {
    url: String,
    batch: u64,
    rate: u64,
    seconds: u64,
    limit: u64,
    tasks: usize,
}

fn parse() -> Result<Args, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !(5..=6).contains(&args.len()) {
        return Err("usage: batch-worker URL BATCH RATE SECONDS LIMIT [TASKS]".into());
    }
    let num = |i: usize, what: &str| -> Result<u64, String> {
        args[i]
            .parse()
            .map_err(|_| format!("{what} must be a whole number, got {:?}", args[i]))
    };
    Ok(Args {
        url: args[0].clone(),
        batch: num(1, "BATCH")?.max(1),
        rate: num(2, "RATE")?,
        seconds: num(3, "SECONDS")?,
        limit: num(4, "LIMIT")?,
        tasks: if args.len() == 6 {
            usize::try_from(num(5, "TASKS")?.max(1)).unwrap_or(1)
        } else {
            1
        },
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let quota = match Quota::per_second(args.limit) {
        Ok(q) => q,
        Err(e) => {
            eprintln!("LIMIT: {e}");
            return ExitCode::from(2);
        }
    };
    let redis = match RedisConfig::new(&args.url)
        .timeout(Duration::from_secs(1))
        .connect()
        .await
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot connect: {e}");
            return ExitCode::FAILURE;
        }
    };
    let policy = Policy::new(Limit::new(Algorithm::FixedWindow, quota));
    let config = BatchConfig::default().batch(args.batch).hot_rate(0);
    let layer = Arc::new(Batched::new(redis, config));
    let policy = match layer.prepare(&policy) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("LIMIT: {e}");
            return ExitCode::from(2);
        }
    };
    let counts = Arc::new(Counts::default());
    let start = Instant::now();
    let end = start + Duration::from_secs(args.seconds);
    let tasks: Vec<_> = (0..args.tasks)
        .map(|t| {
            let (layer, counts, policy) = (Arc::clone(&layer), Arc::clone(&counts), policy.clone());
            let (rate, tasks, batch) = (args.rate, args.tasks as u64, args.batch);
            // One key per batch size, so runs against the same server do
            // not share a key.
            let key = format!("hot-{batch}");
            tokio::spawn(async move {
                let mut i = t as u64;
                loop {
                    if let Some(offset) = (i * 1_000_000_000).checked_div(rate) {
                        tokio::time::sleep_until(start + Duration::from_nanos(offset)).await;
                    }
                    if Instant::now() >= end {
                        return Ok::<(), tollgate::BackendError>(());
                    }
                    let decision = if batch == 1 {
                        layer.backend().check(&key, policy.inner(), 1).await?
                    } else {
                        layer.check(&key, &policy, 1).await?
                    };
                    let second = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    let mut c = counts.lock().unwrap_or_else(|p| p.into_inner());
                    *c.0.entry(second).or_default() += u64::from(decision.allowed);
                    c.1 += 1;
                    i += tasks;
                }
            })
        })
        .collect();
    for task in tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                eprintln!("store error: {e}");
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("caller task failed: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    layer.shutdown().await;
    let (per_second, requests): (BTreeMap<u64, u64>, u64) = {
        let c = counts.lock().unwrap_or_else(|p| p.into_inner());
        (c.0.clone(), c.1)
    };
    for (second, admitted) in &per_second {
        println!("second {second} {admitted}");
    }
    let calls = if args.batch == 1 {
        requests
    } else {
        layer.stats().store_calls
    };
    let admitted: u64 = per_second.values().sum();
    println!("total {requests} {admitted} {calls}");
    ExitCode::SUCCESS
}
