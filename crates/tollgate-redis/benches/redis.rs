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
//! 3. latency per decision at low load (one caller), next to a bare `PING`;
//! 4. what a decision costs with 64 callers sharing one backend (one
//!    multiplexed connection), its decisions folded (the default) or each
//!    sent alone, over 10,000 keys and on one hot key: `FCALL`s per
//!    decision and the server's time in them (`INFO commandstats`), the
//!    server process's CPU and this process's CPU per decision, next to
//!    `redis-benchmark -c 64` sending the same `FCALL`, one at a time and
//!    16 pipelined per connection (the ceilings one Redis sustains);
//! 5. `folded` and `alone` (`foldedhot` and `alonehot` on one hot key):
//!    10,000 × SECONDS decisions from 64 callers sharing one backend,
//!    folded or each alone, for counting instructions
//!    under callgrind: the client's (`valgrind --tool=callgrind <bench
//!    binary> folded`), or the server's (a `redis-server` on `PATH` that
//!    runs the real one under callgrind; the section shuts the server down
//!    so that callgrind writes its counts).
//!
//! `cargo bench -p tollgate-redis --bench redis [-- SECONDS] [SECTION...]`
//! (default 2 s per throughput run, best of three interleaved runs; the
//! sections `memory`, `throughput`, `latency`, `cost`, default all; `folded`
//! and `alone` only when named). Not criterion: what
//! matters here is throughput under concurrency against outside tools, which
//! criterion does not model.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use tollgate::{Algorithm, Backend, BackendExt, Limit, Policy, Quota};
use tollgate_redis::harness::RedisServer;
use tollgate_redis::{RedisBackend, RedisConfig, DEFAULT_FOLD};

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
    let sections: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a.chars().all(|c| c.is_ascii_lowercase()))
        .collect();
    let named = |name: &str| sections.iter().any(|s| s == name);
    let wanted = |name: &str| sections.is_empty() || named(name);
    let server = RedisServer::start()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let policy = Policy::new(Limit::new(Algorithm::Gcra, Quota::per_minute(1000)?));
    if wanted("memory") {
        rt.block_on(memory(&server))?;
    }
    if wanted("throughput") {
        throughput_table(&server, &rt, &policy, seconds)?;
    }
    if wanted("latency") {
        rt.block_on(latency(&server, &policy))?;
    }
    if wanted("cost") {
        cost_table(&server, &rt, seconds)?;
    }
    let callgrind = [
        ("folded", DEFAULT_FOLD, Keys::Many),
        ("alone", 0, Keys::Many),
        ("foldedhot", DEFAULT_FOLD, Keys::Hot),
        ("alonehot", 0, Keys::Hot),
    ];
    for (section, fold, keys) in callgrind {
        if named(section) {
            let policy = Policy::new(Limit::new(Algorithm::Gcra, Quota::per_second(1_000_000)?));
            let run = Run::Decisions(10_000 * seconds);
            let (_, decisions, _, calls) =
                rt.block_on(shared_throughput(&server, &policy, keys, fold, run))?;
            println!("{section}: {decisions} decisions in {calls} FCALLs (count the instructions with callgrind)");
            // A server under callgrind writes its counts only on a clean exit.
            let _ = server.cli(&["shutdown", "nosave"]);
        }
    }
    Ok(())
}

/// Decisions per second at each concurrency, one connection per caller,
/// next to the ceiling and rate-limiter-flexible.
fn throughput_table(
    server: &RedisServer,
    rt: &tokio::runtime::Runtime,
    policy: &Policy,
    seconds: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let run = Duration::from_secs(seconds);
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
            ours = ours.max(rt.block_on(throughput(server, policy, callers, run))?);
            ceiling = ceiling.max(redis_benchmark(server, callers, seconds)?);
            if let Some((rps, _, _)) = node_bench(server, callers, seconds) {
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
    let requests = 20_000 * seconds * callers.min(4) as u64;
    let limit = Limit::new(Algorithm::Gcra, Quota::per_minute(1000)?);
    redis_benchmark_fcall(server, &limit, Keys::Many, callers, 1, requests)
}

/// The keys decisions go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Keys {
    /// [`KEYS`] random keys.
    Many,
    /// One key for every decision.
    Hot,
}

/// `redis-benchmark` sending `requests` `FCALL`s of a check of cost 1 under
/// `limit` (its arguments as the backend sends them, without a deadline)
/// over `callers` connections, `pipeline` at a time on each; its requests
/// per second.
fn redis_benchmark_fcall(
    server: &RedisServer,
    limit: &Limit,
    keys: Keys,
    callers: usize,
    pipeline: usize,
    requests: u64,
) -> Result<f64, Box<dyn std::error::Error>> {
    let e = tollgate_redis::exact::encode(limit)?;
    let q = &limit.quota;
    let tag = match keys {
        Keys::Many => "k__rand_int__",
        Keys::Hot => "hot",
    };
    let key = format!(
        "tp:{{{tag}}}:{}:{}:{}:{}",
        e.algorithm,
        q.limit(),
        q.period_ns(),
        q.burst()
    );
    let numbers = [e.cap, e.x, e.y, e.max].map(|v| v.to_string());
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &server.port().to_string()])
        .args(["-c", &callers.to_string(), "-n", &requests.to_string()])
        .args(["-P", &pipeline.to_string()])
        .args(["-r", &KEYS.to_string(), "-q", "--csv"])
        .args(["FCALL", tollgate_redis::FUNCTION, "1", &key, "", "0"])
        .args(["check", "1", "1", e.algorithm])
        .args(&numbers)
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

/// Callers of the cost table, sharing one backend.
const COST_CALLERS: usize = 64;

/// What one run cost: decisions per second, `FCALL`s per decision and the
/// server's time in them per decision (`INFO commandstats`), and CPU
/// microseconds per decision of the server process and of this process (0
/// for `redis-benchmark`, another process).
struct Cost {
    rate: f64,
    fcalls: f64,
    fcall_us: f64,
    server_us: f64,
    client_us: f64,
}

/// What a run reports: decisions per second, decisions, this process's CPU
/// seconds, and `FCALL`s sent (as far as this process knows).
type Report = (f64, u64, f64, u64);

/// The cost table: tollgate (folded and alone) and `redis-benchmark`, over
/// many keys and one hot key, interleaved rounds, the median of each
/// cell's rounds.
fn cost_table(
    server: &RedisServer,
    rt: &tokio::runtime::Runtime,
    seconds: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    // High enough never to refuse: every decision writes.
    let limit = Limit::new(Algorithm::Gcra, Quota::per_second(1_000_000)?);
    let policy = Policy::new(limit);
    let run = Run::For(Duration::from_secs(seconds));
    println!(
        "\n## Cost of a decision ({COST_CALLERS} callers, GCRA 10^6/s never refusing, \
         median of {ROUNDS} interleaved runs of {seconds} s, load average {})\n",
        load_average()
    );
    println!("| keys | client | decisions/s | FCALLs per decision | server us in FCALL per decision | server CPU us per decision | client CPU us per decision |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for keys in [Keys::Many, Keys::Hot] {
        let mut rows: [(&str, Vec<Cost>); 4] = [
            ("tollgate-redis `check`, folded (default)", vec![]),
            ("tollgate-redis `check`, each alone (`fold(0)`)", vec![]),
            ("redis-benchmark -c 64", vec![]),
            ("redis-benchmark -c 64 -P 16", vec![]),
        ];
        for _ in 0..ROUNDS {
            for (fold, row) in [(DEFAULT_FOLD, 0), (0, 1)] {
                rows[row].1.push(measure(server, || {
                    rt.block_on(shared_throughput(server, &policy, keys, fold, run))
                })?);
            }
            for (pipeline, row) in [(1, 2), (16, 3)] {
                let requests = 25_000 * seconds * pipeline.min(4) as u64;
                rows[row].1.push(measure(server, || {
                    redis_benchmark_fcall(server, &limit, keys, COST_CALLERS, pipeline, requests)
                        .map(|rps| (rps, requests, 0.0, requests))
                })?);
            }
        }
        for (name, runs) in rows {
            let c = median(runs);
            println!(
                "| {} | {name} | {:.0} | {:.3} | {:.2} | {:.2} | {:.2} |",
                match keys {
                    Keys::Many => "10,000",
                    Keys::Hot => "1 (hot)",
                },
                c.rate,
                c.fcalls,
                c.fcall_us,
                c.server_us,
                c.client_us
            );
        }
    }
    Ok(())
}

/// Runs `work` between readings of the server's counters.
fn measure(
    server: &RedisServer,
    work: impl FnOnce() -> Result<Report, Box<dyn std::error::Error>>,
) -> Result<Cost, Box<dyn std::error::Error>> {
    server.cli(&["config", "resetstat"])?;
    let cpu_before = server_cpu(server)?;
    let (rate, decisions, client_s, _) = work()?;
    let server_s = server_cpu(server)? - cpu_before;
    let stats = server.cli(&["info", "commandstats"])?;
    let fcall = |field: &str| {
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_fcall:"))
            .and_then(|l| l.split(',').find_map(|f| f.strip_prefix(field)))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let per = |x: f64| x / decisions.max(1) as f64;
    Ok(Cost {
        rate,
        fcalls: per(fcall("calls=")),
        fcall_us: per(fcall("usec=")),
        server_us: per(server_s * 1e6),
        client_us: per(client_s * 1e6),
    })
}

/// The server process's CPU seconds (`INFO cpu`, user and system).
fn server_cpu(server: &RedisServer) -> Result<f64, Box<dyn std::error::Error>> {
    let info = server.cli(&["info", "cpu"])?;
    Ok(info
        .lines()
        .filter(|l| l.starts_with("used_cpu_user:") || l.starts_with("used_cpu_sys:"))
        .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
        .sum())
}

/// This process's CPU seconds (user and system, every thread).
fn process_cpu() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

fn median(mut runs: Vec<Cost>) -> Cost {
    runs.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    runs.swap_remove(runs.len() / 2)
}

/// How long a run lasts.
#[derive(Clone, Copy)]
enum Run {
    /// As many decisions as fit in this time.
    For(Duration),
    /// This many decisions, whatever the time (under callgrind).
    Decisions(u64),
}

/// [`COST_CALLERS`] tasks sharing one backend (one multiplexed connection,
/// which pipelines their concurrent calls), as an application's tasks
/// would, with the policy prepared once and at most `fold` decisions per
/// `FCALL`.
async fn shared_throughput(
    server: &RedisServer,
    policy: &Policy,
    keys: Keys,
    fold: usize,
    run: Run,
) -> Result<Report, Box<dyn std::error::Error>> {
    let backend = RedisConfig::new(server.url())
        .prefix("tp:")
        .timeout(Duration::from_secs(1))
        .fold(fold)
        .connect()
        .await?;
    let policy = backend.prepare(policy)?;
    backend.check("warm", &policy, 1).await?;
    // Key names made before the clock starts: the cost is the calls'.
    let names: Arc<Vec<String>> = Arc::new(match keys {
        Keys::Many => (0..KEYS).map(|k| format!("k{k}")).collect(),
        Keys::Hot => vec!["hot".into()],
    });
    let fcalls_before = fcalls(server)?;
    let cpu = process_cpu();
    let start = Instant::now();
    let left = Arc::new(std::sync::atomic::AtomicU64::new(match run {
        Run::For(_) => u64::MAX,
        Run::Decisions(n) => n,
    }));
    let more = move || match run {
        Run::For(time) => start.elapsed() < time,
        Run::Decisions(_) => {
            use std::sync::atomic::Ordering::Relaxed;
            left.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
                .is_ok()
        }
    };
    let tasks: Vec<_> = (0..COST_CALLERS)
        .map(|i| {
            let (backend, policy, names, more) =
                (backend.clone(), policy.clone(), names.clone(), more.clone());
            tokio::spawn(async move {
                let mut decisions = 0u64;
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ i as u64;
                while more() {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let key = &names[(rng % names.len() as u64) as usize];
                    backend.check(key, &policy, 1).await?;
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
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = process_cpu() - cpu;
    let calls = fcalls(server)? - fcalls_before;
    Ok((decisions as f64 / elapsed, decisions, cpu, calls))
}

/// `FCALL`s the server has run since its statistics were last reset.
fn fcalls(server: &RedisServer) -> Result<u64, Box<dyn std::error::Error>> {
    let stats = server.cli(&["info", "commandstats"])?;
    Ok(stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_fcall:calls="))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0))
}
