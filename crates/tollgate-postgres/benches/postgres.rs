//! The PostgreSQL measurements of `docs/PERFORMANCE.md`, on a server the
//! bench starts on a free port (`fsync=off`, `synchronous_commit=off`: the
//! CPU and protocol cost of a decision, not the disk's):
//!
//! 1. decisions per second for 1, 16 and 64 concurrent callers (one
//!    connection each, GCRA 1000/min, 10,000 random keys), next to
//!    `pgbench` running the same statement from a custom script (the
//!    ceiling), the naive read-then-write window ([`tollgate_postgres::naive`])
//!    and `tollgate-redis` on a `redis-server` started alongside;
//! 2. latency per decision at low load (one caller), next to a bare
//!    `SELECT 1`;
//! 3. bytes per key: `pg_column_size` of a row per algorithm, and the
//!    table's and its indexes' sizes at 1M keys.
//!
//! 4. with `-- seed`, only this: pgbench running the statement a check
//!    sends (a token bucket of capacity 100 refilled at 10/s, then GCRA of
//!    the same shape) against the baseline of a hand-written limiter, one
//!    float `UPDATE ... WHERE enough tokens ... RETURNING` on a table of
//!    10,000 buckets, at 1, 16 and 64 clients, medians of 3 interleaved
//!    rounds and their ratios.
//!
//! `cargo bench -p tollgate-postgres --bench postgres [-- SECONDS]` (default
//! 2 s per throughput run, best of three interleaved runs); `-- sizes` for
//! the bytes per key only; `-- seed [SECONDS]` for the comparison (default
//! 5 s per run); `-- seed-setup URL DIR` only sets up the comparison's
//! tables on the server at URL and writes its pgbench scripts to DIR (for
//! counting the server's instructions per statement under callgrind: see
//! `benches/postgres_instructions.sh`).

use std::process::Command;
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls};
use tollgate::{Algorithm, Backend, BackendExt, Limit, Policy, Quota};
use tollgate_postgres::harness::PgServer;
use tollgate_postgres::naive::NaiveWindow;
use tollgate_postgres::PostgresConfig;
use tollgate_redis::harness::RedisServer;
use tollgate_redis::RedisConfig;

/// Distinct keys the throughput runs spread over.
const KEYS: u64 = 10_000;
const CONCURRENCY: [usize; 3] = [1, 16, 64];
/// Interleaved runs per measurement; the best one is reported.
const ROUNDS: usize = 3;
const TABLE_KEYS: i64 = 1_000_000;

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seconds: u64 = args.iter().find_map(|a| a.parse().ok()).unwrap_or(2);
    // `sizes` measures only the bytes per key.
    let only_sizes = args.iter().any(|a| a == "sizes");
    if let Some(i) = args.iter().position(|a| a == "seed-setup") {
        let (Some(url), Some(dir)) = (args.get(i + 1), args.get(i + 2)) else {
            return Err("usage: -- seed-setup URL DIR".into());
        };
        for (name, script) in seed_setup(url, std::path::Path::new(dir))? {
            println!("{name}: {script}");
        }
        return Ok(());
    }
    if args.iter().any(|a| a == "seed") {
        return against_a_hand_written_bucket(
            args.iter().find_map(|a| a.parse().ok()).unwrap_or(5),
        );
    }
    let run = Duration::from_secs(seconds);
    let server = PgServer::start()?;
    let redis = RedisServer::start().ok();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let policy = Policy::new(Limit::new(Algorithm::Gcra, Quota::per_minute(1000)?));
    let admin = rt.block_on(connect(&server.url()))?;
    rt.block_on(PostgresConfig::new(server.url()).run_migrations())?;
    let script = write_script(
        &std::env::temp_dir(),
        "gcra",
        &tollgate_postgres::harness::pgbench_check_script(&policy, 1, KEYS),
    )?;
    let naive = rt.block_on(NaiveWindow::create(&admin, "naive_bench", 1_000_000_000))?;
    drop(naive);

    if only_sizes {
        return rt.block_on(bytes_per_key(&server, &admin));
    }
    println!(
        "## Decisions per second (GCRA 1000/min, {KEYS} random keys, best of {ROUNDS} \
         interleaved runs of {seconds} s)\n"
    );
    println!("| callers | tollgate-postgres | pgbench, same statement | ratio | naive read-then-write | tollgate-redis |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for callers in CONCURRENCY {
        let (mut ours, mut ceiling, mut naive, mut on_redis) = (0f64, 0f64, 0f64, None::<f64>);
        for _ in 0..ROUNDS {
            ours = ours.max(rt.block_on(throughput(&server, &policy, callers, run))?);
            ceiling = ceiling.max(pgbench(&server, &script, callers, seconds)?);
            naive = naive.max(rt.block_on(naive_throughput(&server, callers, run))?);
            if let Some(redis) = &redis {
                let rps = rt.block_on(redis_throughput(redis, &policy, callers, run))?;
                on_redis = Some(on_redis.unwrap_or(0f64).max(rps));
            }
        }
        let redis_col = on_redis.map_or("not run".into(), |r| format!("{r:.0}"));
        println!(
            "| {callers} | {ours:.0} | {ceiling:.0} | {:.2}x | {naive:.0} | {redis_col} |",
            ours / ceiling
        );
    }
    // One caller on a single-threaded runtime, as pgbench's one thread: no
    // hop between the caller's task and the connection's on two threads.
    let single = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (mut ours, mut ceiling) = (0f64, 0f64);
    for _ in 0..ROUNDS {
        ours = ours.max(single.block_on(throughput(&server, &policy, 1, run))?);
        ceiling = ceiling.max(pgbench(&server, &script, 1, seconds)?);
    }
    println!(
        "\nOne caller on a current-thread runtime: {ours:.0} against pgbench's {ceiling:.0} \
         ({:.2}x).",
        ours / ceiling
    );
    rt.block_on(latency(&server, &admin, &policy))?;
    rt.block_on(bytes_per_key(&server, &admin))?;
    Ok(())
}

async fn connect(url: &str) -> Result<Client, Error> {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(conn);
    Ok(client)
}

/// Random keys from a per-caller xorshift, the same for every contender.
fn keys(seed: u64) -> impl FnMut() -> String {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ seed;
    move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        format!("k{}", rng % KEYS)
    }
}

/// Runs `callers` loops of `one` until `run` has passed; decisions per second.
async fn drive<S, F, Fut>(states: Vec<S>, run: Duration, one: F) -> Result<f64, Error>
where
    S: Send + 'static,
    F: Fn(&S, String) -> Fut + Send + Sync + Copy + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let start = Instant::now();
    let tasks: Vec<_> = states
        .into_iter()
        .enumerate()
        .map(|(i, state)| {
            tokio::spawn(async move {
                let mut next_key = keys(i as u64);
                let mut decisions = 0u64;
                while start.elapsed() < run {
                    one(&state, next_key()).await?;
                    decisions += 1;
                }
                Ok::<_, String>(decisions)
            })
        })
        .collect();
    let mut decisions = 0;
    for task in tasks {
        decisions += task.await??;
    }
    Ok(decisions as f64 / start.elapsed().as_secs_f64())
}

/// Decisions per second of `backends` (one per caller) on `policy`.
async fn decisions<B: Backend + Clone + 'static>(
    backends: Vec<B>,
    policy: &Policy,
    run: Duration,
) -> Result<f64, Error> {
    let states = backends
        .into_iter()
        .map(|b| b.prepare(policy).map(|p| (b, p)))
        .collect::<Result<_, _>>()?;
    drive(states, run, |(backend, policy), key| {
        let (backend, policy) = (backend.clone(), policy.clone());
        async move {
            backend
                .check(&key, &policy, 1)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    })
    .await
}

/// One backend per caller, each made by `connect`.
async fn per_caller<B, Fut>(callers: usize, connect: impl Fn() -> Fut) -> Result<Vec<B>, Error>
where
    Fut: std::future::Future<Output = Result<B, tollgate::BackendError>>,
{
    let mut backends = Vec::with_capacity(callers);
    for _ in 0..callers {
        backends.push(connect().await?);
    }
    Ok(backends)
}

async fn throughput(
    server: &PgServer,
    policy: &Policy,
    callers: usize,
    run: Duration,
) -> Result<f64, Error> {
    let backends = per_caller(callers, || {
        PostgresConfig::new(server.url())
            .pool_size(1)
            .migrate(false)
            .cleanup_every(None)
            .timeout(Duration::from_secs(10))
            .connect()
    })
    .await?;
    decisions(backends, policy, run).await
}

async fn naive_throughput(server: &PgServer, callers: usize, run: Duration) -> Result<f64, Error> {
    let mut clients = Vec::with_capacity(callers);
    for _ in 0..callers {
        let client = std::sync::Arc::new(connect(&server.url()).await?);
        let window = NaiveWindow::create(&client, "naive_bench", 1_000_000_000).await?;
        clients.push(std::sync::Arc::new((client, window)));
    }
    drive(clients, run, |state, key| {
        let state = state.clone();
        async move {
            let (client, window) = &*state;
            window
                .check(client, &key)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    })
    .await
}

async fn redis_throughput(
    server: &RedisServer,
    policy: &Policy,
    callers: usize,
    run: Duration,
) -> Result<f64, Error> {
    let backends = per_caller(callers, || {
        RedisConfig::new(server.url())
            .prefix("tp:")
            .timeout(Duration::from_secs(10))
            .connect()
    })
    .await?;
    decisions(backends, policy, run).await
}

/// `pgbench` with `callers` connections running the script, prepared
/// statements like the driver's; transactions (= decisions) per second.
fn pgbench(server: &PgServer, script: &str, callers: usize, seconds: u64) -> Result<f64, Error> {
    let out = Command::new(server.bin().join("pgbench"))
        .args(["-h", "127.0.0.1", "-p", &server.port().to_string()])
        .args([
            "-U",
            tollgate_postgres::harness::USER,
            "-n",
            "-M",
            "prepared",
        ])
        .args([
            "-c",
            &callers.to_string(),
            "-j",
            &callers.min(2).to_string(),
        ])
        .args(["-T", &seconds.to_string(), "-f", script, "postgres"])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l["tps = ".len()..].split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| {
            format!(
                "unexpected pgbench output: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
            .into()
        })
}

/// p50/p99 of one caller's decisions, next to a bare `SELECT 1`.
async fn latency(server: &PgServer, admin: &Client, policy: &Policy) -> Result<(), Error> {
    const SAMPLES: usize = 20_000;
    let backend = PostgresConfig::new(server.url())
        .pool_size(1)
        .cleanup_every(None)
        .timeout(Duration::from_secs(10))
        .connect()
        .await?;
    let ping = admin.prepare("SELECT 1").await?;
    let policy = backend.prepare(policy)?;
    let mut next_key = keys(7);
    let (mut decisions, mut pings) = (Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        let key = next_key();
        let t = Instant::now();
        backend.check(&key, &policy, 1).await?;
        decisions.push(t.elapsed());
        let t = Instant::now();
        admin.query_one(&ping, &[]).await?;
        pings.push(t.elapsed());
    }
    println!("\n## Latency at low load (one caller, {SAMPLES} sequential calls, us)\n");
    println!("| call | p50 | p99 |");
    println!("|---|---:|---:|");
    for (name, mut v) in [("decision (GCRA)", decisions), ("bare SELECT 1", pings)] {
        v.sort();
        let pct = |p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)].as_secs_f64() * 1e6;
        println!("| {name} | {:.0} | {:.0} |", pct(0.5), pct(0.99));
    }
    Ok(())
}

/// `pg_column_size` of one key's row per algorithm (100/min, after one
/// request and with the quota spent), then a table of 1M GCRA keys.
async fn bytes_per_key(server: &PgServer, admin: &Client) -> Result<(), Error> {
    let backend = PostgresConfig::new(server.url())
        .table("sizes")
        .cleanup_every(None)
        .timeout(Duration::from_secs(10))
        .connect()
        .await?;
    println!("\n## Bytes per key (pg_column_size of the row)\n");
    println!("| algorithm | 100/min, 1 request | 100/min, quota spent |");
    println!("|---|---:|---:|");
    for algorithm in Algorithm::ALL {
        let policy = Policy::new(Limit::new(algorithm, Quota::per_minute(100)?));
        let policy = backend.prepare(&policy).unwrap();
        let mut cells = Vec::new();
        for spent in [1, 100] {
            let key = format!("{algorithm}-{spent}");
            for _ in 0..spent {
                backend.check(&key, &policy, 1).await?;
            }
            let bytes: i32 = admin
                .query_one(
                    "SELECT pg_column_size(s.*) FROM tollgate.sizes s WHERE key = $1",
                    &[&key],
                )
                .await?
                .get(0);
            cells.push(bytes.to_string());
        }
        println!("| {algorithm} | {} |", cells.join(" | "));
    }
    // 1M keys shaped like a real GCRA row (keys `user-<n>`), then VACUUM so
    // the sizes are the steady state's.
    admin
        .batch_execute(&format!(
            "INSERT INTO tollgate.sizes (key, policy, state, log, idle_at)
             SELECT 'user-' || i, s.policy, s.state, s.log, s.idle_at + i
             FROM tollgate.sizes s, generate_series(1, {TABLE_KEYS}) i
             WHERE s.key = 'gcra-1'"
        ))
        .await?;
    admin.batch_execute("VACUUM ANALYZE tollgate.sizes").await?;
    let row = admin
        .query_one(
            "SELECT count(*), pg_relation_size('tollgate.sizes'),
                    pg_indexes_size('tollgate.sizes'), pg_total_relation_size('tollgate.sizes'),
                    pg_relation_size('tollgate.sizes_pkey'), pg_relation_size('tollgate.sizes_idle_at')
             FROM tollgate.sizes",
            &[],
        )
        .await?;
    let rows: i64 = row.get(0);
    let mib = |b: i64| b as f64 / (1 << 20) as f64;
    let (table, indexes, total, pkey, idle): (i64, i64, i64, i64, i64) =
        (row.get(1), row.get(2), row.get(3), row.get(4), row.get(5));
    println!("\n## {rows} GCRA keys (`user-<n>`, 100/min)\n");
    println!("| relation | size | bytes per key |");
    println!("|---|---:|---:|");
    for (name, bytes) in [
        ("table (heap)", table),
        ("primary key (key, policy)", pkey),
        ("idle_at index", idle),
        ("indexes together", indexes),
        ("total (with TOAST, maps)", total),
    ] {
        println!(
            "| {name} | {:.1} MiB | {:.0} |",
            mib(bytes),
            bytes as f64 / rows as f64
        );
    }
    Ok(())
}

/// The hand-written baseline: a float bucket per key (capacity 100, 10
/// tokens a second), one statement that refills, checks and takes a token
/// in place, and returns nothing when the bucket is short.
const BASELINE_TABLE: &str = "CREATE TABLE rate_limit_bucket (
    bucket_key VARCHAR(200) PRIMARY KEY,
    tokens DOUBLE PRECISION NOT NULL,
    updated_at TIMESTAMP NOT NULL)";
const BASELINE_SCRIPT: &str = "\\set k random(0, 9999)
UPDATE rate_limit_bucket SET tokens = LEAST(100, tokens + 10 * GREATEST(0, EXTRACT(EPOCH FROM (CURRENT_TIMESTAMP - updated_at)))) - 1, updated_at = CURRENT_TIMESTAMP WHERE bucket_key = 'k' || :k AND LEAST(100, tokens + 10 * GREATEST(0, EXTRACT(EPOCH FROM (CURRENT_TIMESTAMP - updated_at)))) >= 1 RETURNING tokens;
";

/// pgbench's transactions per second for the baseline and for what a check
/// sends (token bucket and GCRA, capacity 100 at 10/s), every key's row
/// made beforehand; medians of interleaved rounds, with the load average
/// read before each round.
fn against_a_hand_written_bucket(seconds: u64) -> Result<(), Error> {
    let server = PgServer::start()?;
    let scripts = seed_setup(&server.url(), &std::env::temp_dir())?;
    println!("## pgbench -M prepared -c N -j min(N,2), {KEYS} keys, medians of {ROUNDS} interleaved rounds of {seconds} s\n");
    println!(
        "| clients | {} | load average before each round |",
        scripts
            .iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>()
            .join(" | ")
    );
    println!("|---:|{}---|", "---:|".repeat(scripts.len()));
    for clients in CONCURRENCY {
        let mut tps = vec![Vec::new(); scripts.len()];
        let mut loads = Vec::new();
        for _ in 0..ROUNDS {
            loads.push(load_average());
            for (i, (_, script)) in scripts.iter().enumerate() {
                tps[i].push(pgbench(&server, script, clients, seconds)?);
            }
        }
        let medians: Vec<f64> = tps.iter_mut().map(|runs| median(runs)).collect();
        let cells: Vec<String> = medians
            .iter()
            .map(|m| format!("{m:.0} ({:.2}x)", m / medians[0]))
            .collect();
        println!(
            "| {clients} | {} | {} |",
            cells.join(" | "),
            loads.join(", ")
        );
    }
    Ok(())
}

/// The comparison's tables on the server at `url`, every key's row made,
/// and its pgbench scripts written to `dir`: (contender, script) pairs,
/// the baseline first. `-- seed-setup URL DIR` runs only this, to measure
/// the statements on a server of one's own (under callgrind, say).
fn seed_setup(url: &str, dir: &std::path::Path) -> Result<Vec<(String, String)>, Error> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let admin = rt.block_on(connect(url))?;
    rt.block_on(PostgresConfig::new(url).run_migrations())?;
    rt.block_on(admin.batch_execute(&format!(
        "{BASELINE_TABLE};
         INSERT INTO rate_limit_bucket
             SELECT 'k' || i, 100, CURRENT_TIMESTAMP FROM generate_series(0, {}) i",
        KEYS - 1
    )))?;
    let quota = Quota::with_parts(10, 1_000_000_000, 100)?;
    let mut scripts = vec![(
        "hand-written float bucket".to_string(),
        write_script(dir, "baseline", BASELINE_SCRIPT)?,
    )];
    for algorithm in [Algorithm::TokenBucket, Algorithm::Gcra] {
        let policy = Policy::new(Limit::new(algorithm, quota));
        rt.block_on(charge_every_key(url, &policy))?;
        let script = tollgate_postgres::harness::pgbench_check_script(&policy, 1, KEYS);
        scripts.push((
            format!("tollgate {algorithm}"),
            write_script(dir, &algorithm.to_string(), &script)?,
        ));
    }
    rt.block_on(admin.batch_execute("VACUUM ANALYZE"))?;
    Ok(scripts)
}

fn write_script(dir: &std::path::Path, name: &str, text: &str) -> Result<String, Error> {
    let path = dir.join(format!(
        "tollgate-pgbench-{}-{name}.sql",
        std::process::id()
    ));
    std::fs::write(&path, text)?;
    Ok(path.to_string_lossy().into_owned())
}

/// Two admitted checks per key, so every contender updates existing rows,
/// and ours as a key in use has them: the first check makes the row
/// (`_apply_within`, its idle_at on a second), the second is the one-statement
/// charge, which puts idle_at on a minute; without it each key's first
/// update in the run would be the one non-HOT update a new key costs.
async fn charge_every_key(url: &str, policy: &Policy) -> Result<(), Error> {
    let backend = PostgresConfig::new(url)
        .pool_size(8)
        .migrate(false)
        .cleanup_every(None)
        .timeout(Duration::from_secs(10))
        .connect()
        .await?;
    let tasks: Vec<_> = (0..8)
        .map(|part| {
            let backend = backend.clone();
            let policy = backend.prepare(policy);
            tokio::spawn(async move {
                let policy = policy?;
                for k in (part..KEYS).step_by(8) {
                    for _ in 0..2 {
                        backend.check(&format!("k{k}"), &policy, 1).await?;
                    }
                }
                Ok::<_, tollgate::BackendError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    Ok(())
}

fn median(runs: &mut [f64]) -> f64 {
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

/// The 1-minute load average, as `uptime` shows it.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}
