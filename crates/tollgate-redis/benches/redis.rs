//! The Redis measurements of `docs/PERFORMANCE.md`, on a `redis-server`
//! started on a free port:
//!
//! 1. memory per key per algorithm (`MEMORY USAGE`) at 100/min and 1,000/min,
//!    after one request and with the whole quota spent;
//! 2. decisions per second for 1, 16 and 64 concurrent callers (one
//!    connection each, random keys), next to `redis-benchmark` running the
//!    same `FCALL` at the same concurrency (the ceiling) and, when
//!    `benches/node/node_modules` is installed, rate-limiter-flexible over
//!    ioredis;
//! 3. latency per decision at low load (one caller), next to a bare `PING`.
//!
//! `cargo bench -p tollgate-redis --bench redis [-- SECONDS]` (default 2 s
//! per throughput run, best of three interleaved runs). Not criterion: what
//! matters here is throughput under concurrency against outside tools, which
//! criterion does not model.

use std::process::Command;
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use tollgate::{Algorithm, Backend, BackendExt, Limit, Policy, Quota};
use tollgate_redis::harness::RedisServer;
use tollgate_redis::{RedisBackend, RedisConfig};

/// Distinct keys the throughput runs spread over.
const KEYS: u64 = 10_000;
const CONCURRENCY: [usize; 3] = [1, 16, 64];
/// Interleaved runs per measurement; the best one is reported.
const ROUNDS: usize = 3;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2);
    let run = Duration::from_secs(seconds);
    let server = RedisServer::start()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(memory(&server))?;
    let policy = Policy::new(Limit::new(Algorithm::Gcra, Quota::per_minute(1000)?));
    println!(
        "\n## Decisions per second (GCRA 1000/min, {KEYS} random keys, best of {ROUNDS} \
         interleaved runs of {seconds} s)\n"
    );
    println!("| callers | tollgate-redis | redis-benchmark FCALL | ratio | rate-limiter-flexible | tollgate / rlf |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for callers in CONCURRENCY {
        // Interleaved rounds, best of each: the machine is shared, and the
        // best run is the one least disturbed by other work.
        let (mut ours, mut ceiling, mut node) = (0f64, 0f64, None::<f64>);
        for _ in 0..ROUNDS {
            ours = ours.max(rt.block_on(throughput(&server, &policy, callers, run))?);
            ceiling = ceiling.max(redis_benchmark(&server, callers, seconds)?);
            if let Some((rps, _, _)) = node_bench(&server, callers, seconds) {
                node = Some(node.unwrap_or(0f64).max(rps));
            }
        }
        let (node_col, node_ratio) = match node {
            Some(rps) => (format!("{rps:.0}"), format!("{:.2}x", ours / rps)),
            None => ("not installed".into(), "-".into()),
        };
        println!(
            "| {callers} | {ours:.0} | {ceiling:.0} | {:.2}x | {node_col} | {node_ratio} |",
            ours / ceiling
        );
    }
    rt.block_on(latency(&server, &policy))?;
    Ok(())
}

/// Bytes per key from `MEMORY USAGE`, summed over the key's Redis keys.
async fn memory(server: &RedisServer) -> Result<(), Box<dyn std::error::Error>> {
    let redis = RedisConfig::new(server.url())
        .prefix("mem:")
        .connect()
        .await?;
    println!("## Memory per key (MEMORY USAGE, bytes)\n");
    println!("| algorithm | 100/min, 1 request | 100/min, quota spent | 1,000/min, 1 request | 1,000/min, quota spent |");
    println!("|---|---:|---:|---:|---:|");
    for algorithm in Algorithm::ALL {
        let mut cells = Vec::new();
        for limit in [100, 1000] {
            let policy = Policy::new(Limit::new(algorithm, Quota::per_minute(limit)?));
            let prepared = redis.prepare(&policy)?;
            for spent in [1, limit] {
                let key = format!("{algorithm}-{limit}-{spent}");
                // One request per call, as real traffic would charge them.
                for _ in 0..spent {
                    redis.check(&key, &prepared, 1).await?;
                }
                let mut bytes = 0;
                for k in redis.redis_keys(&key, &policy)? {
                    let out = server.cli(&["memory", "usage", &k, "samples", "0"])?;
                    bytes += out.trim().parse::<u64>().unwrap_or(0);
                }
                cells.push(bytes.to_string());
            }
        }
        println!("| {algorithm} | {} |", cells.join(" | "));
    }
    Ok(())
}

/// Decisions per second with `callers` concurrent callers, one connection
/// each.
async fn throughput(
    server: &RedisServer,
    policy: &Policy,
    callers: usize,
    run: Duration,
) -> Result<f64, Box<dyn std::error::Error>> {
    let mut backends = Vec::with_capacity(callers);
    for _ in 0..callers {
        let config = RedisConfig::new(server.url())
            .prefix("tp:")
            .timeout(Duration::from_secs(1));
        backends.push(config.connect().await?);
    }
    let start = Instant::now();
    let tasks: Vec<_> = backends
        .into_iter()
        .enumerate()
        .map(|(i, backend): (usize, RedisBackend)| {
            let policy = backend.prepare(policy);
            tokio::spawn(async move {
                let policy = policy?;
                let mut decisions = 0u64;
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ i as u64;
                while start.elapsed() < run {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let key = format!("k{}", rng % KEYS);
                    backend.check(&key, &policy, 1).await?;
                    decisions += 1;
                }
                Ok::<_, tollgate::BackendError>(decisions)
            })
        })
        .collect();
    let mut decisions = 0;
    for task in tasks {
        decisions += task.await??;
    }
    Ok(decisions as f64 / start.elapsed().as_secs_f64())
}

/// `redis-benchmark` running the same `FCALL` as a GCRA 1000/min decision
/// (the script's units: T = 60,000 us), `callers` connections, random keys.
fn redis_benchmark(
    server: &RedisServer,
    callers: usize,
    seconds: u64,
) -> Result<f64, Box<dyn std::error::Error>> {
    // About `seconds` worth at the rate a decision allows.
    let requests = (20_000 * seconds * callers.min(4) as u64).to_string();
    let port = server.port().to_string();
    let callers = callers.to_string();
    let key = "tp:{k__rand_int__}:gcra:1000:60000000000:1000";
    // The script's arguments for this limit, as the backend sends them.
    let limit = Limit::new(Algorithm::Gcra, Quota::per_minute(1000).unwrap());
    let max = tollgate_redis::exact::encode(&limit).unwrap().max;
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-c",
            &callers,
            "-n",
            &requests,
        ])
        .args(["-r", &KEYS.to_string(), "-q", "--csv"])
        .args([
            "FCALL",
            tollgate_redis::FUNCTION,
            "1",
            key,
            "",
            "0",
            "check",
            "1",
            "1",
        ])
        .args(["gcra", "1000", "60000", "1", &max.to_string()])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // --csv: a header, then "test","rps",...
    let rps = text
        .lines()
        .nth(1)
        .and_then(|l| l.split(',').nth(1))
        .map(|v| v.trim_matches('"').parse::<f64>())
        .ok_or_else(|| format!("unexpected redis-benchmark output: {text}"))??;
    Ok(rps)
}

/// rate-limiter-flexible over ioredis at the same concurrency, if its
/// packages are installed (`npm ci` in `benches/node`).
fn node_bench(server: &RedisServer, callers: usize, seconds: u64) -> Option<(f64, f64, f64)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/node");
    if !std::path::Path::new(dir).join("node_modules").exists() {
        return None;
    }
    let out = Command::new("node")
        .current_dir(dir)
        .arg("bench.js")
        .args([server.port().to_string(), callers.to_string()])
        .args([seconds.to_string(), KEYS.to_string()])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Vec<f64> = text
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    (v.len() == 3).then(|| (v[0], v[1], v[2]))
}

/// p50/p99 of one caller's decisions, next to the same caller's PING.
async fn latency(server: &RedisServer, policy: &Policy) -> Result<(), Box<dyn std::error::Error>> {
    const SAMPLES: usize = 20_000;
    let redis = RedisConfig::new(server.url())
        .prefix("lat:")
        .connect()
        .await?;
    let mut conn = ConnectionManager::new(redis::Client::open(server.url())?).await?;
    let policy = redis.prepare(policy)?;
    let mut decisions = Vec::with_capacity(SAMPLES);
    let mut pings = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        let key = format!("k{}", i as u64 % KEYS);
        let t = Instant::now();
        redis.check(&key, &policy, 1).await?;
        decisions.push(t.elapsed());
        let t = Instant::now();
        redis::cmd("PING").query_async::<String>(&mut conn).await?;
        pings.push(t.elapsed());
    }
    println!("\n## Latency at low load (one caller, {SAMPLES} sequential calls, us)\n");
    println!("| call | p50 | p99 |");
    println!("|---|---:|---:|");
    for (name, mut v) in [("decision (FCALL, GCRA)", decisions), ("bare PING", pings)] {
        v.sort();
        let pct = |p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)].as_secs_f64() * 1e6;
        println!("| {name} | {:.0} | {:.0} |", pct(0.5), pct(0.99));
    }
    Ok(())
}
