//! Atomicity across processes: 20 processes, each with its own connection,
//! send 25 requests at once at one key allowing 100. Through the backend
//! exactly 100 get through, for every algorithm; through the naive
//! read-then-write window (`tollgate_postgres::naive`) more do.
//!
//! Its own `main` (no libtest): started without arguments it runs the two
//! tests, starting itself again as the worker processes.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tollgate::{Algorithm, Backend, BackendExt, Policy};
use tollgate_postgres::harness::{skip_requested, PgServer};
use tollgate_postgres::naive::NaiveWindow;
use tollgate_postgres::PostgresConfig;
use tollgate_testkit::race::hourly;

const PROCESSES: usize = 20;
const REQUESTS: usize = 25;
const LIMIT: u64 = 100;
const NAIVE_TABLE: &str = "naive_race";
/// Rounds the naive window gets to show its race (it usually does at once).
const NAIVE_ROUNDS: usize = 5;
const WORKER_VAR: &str = "TOLLGATE_PG_WORKER";

fn policy(algorithm: Algorithm) -> Policy {
    hourly(algorithm, LIMIT)
}

fn main() {
    if let Ok(role) = std::env::var(WORKER_VAR) {
        let rt = tokio::runtime::Runtime::new().unwrap();
        return rt.block_on(worker(&role));
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tests = [
        "twenty_processes_admit_exactly_the_limit",
        "naive_read_then_write_admits_more_than_the_limit",
    ];
    if args.iter().any(|a| a == "--list") {
        for t in tests {
            println!("{t}: test");
        }
        return;
    }
    // libtest's flags are accepted and ignored; the first other argument
    // filters by name, as libtest's does.
    let takes_value = [
        "--test-threads",
        "--skip",
        "--format",
        "--color",
        "--logfile",
    ];
    let filter = args
        .iter()
        .enumerate()
        .find(|(i, a)| {
            !a.starts_with('-') && (*i == 0 || !takes_value.contains(&args[i - 1].as_str()))
        })
        .map(|(_, a)| a);
    let wanted: Vec<&str> = tests
        .into_iter()
        .filter(|t| filter.map_or(true, |f| t.contains(f.as_str())))
        .collect();
    if wanted.is_empty() || skip_requested() {
        println!("running 0 tests");
        return;
    }
    let server = PgServer::start().unwrap_or_else(|e| panic!("{e}"));
    for test in wanted {
        print!("test {test} ... ");
        let detail = match test {
            "twenty_processes_admit_exactly_the_limit" => atomic(&server),
            _ => naive(&server),
        };
        println!("ok ({detail})");
    }
}

fn atomic(server: &PgServer) -> String {
    let prefix = format!("processes-{}:", std::process::id());
    // Migrated once here, not racing in every worker (tested elsewhere).
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(PostgresConfig::new(server.url()).run_migrations())
        .unwrap();
    let outputs = run_workers(server, &format!("atomic {prefix}"));
    for algorithm in Algorithm::ALL {
        let admitted: u64 = outputs
            .iter()
            .flat_map(|out| out.lines())
            .filter_map(|line| line.strip_prefix(&format!("{algorithm} ")))
            .map(|n| n.parse::<u64>().unwrap())
            .sum();
        assert_eq!(admitted, LIMIT, "{algorithm}");
    }
    format!("{LIMIT} of {} for each algorithm", PROCESSES * REQUESTS)
}

fn naive(server: &PgServer) -> String {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        NaiveWindow::create(&client, NAIVE_TABLE, LIMIT as i64)
            .await
            .unwrap();
    });
    let mut seen = Vec::new();
    for round in 0..NAIVE_ROUNDS {
        let outputs = run_workers(server, &format!("naive round-{round}"));
        let admitted: u64 = outputs
            .iter()
            .map(|out| out.trim().parse::<u64>().unwrap())
            .sum();
        seen.push(admitted);
        if admitted > LIMIT {
            return format!(
                "{admitted} of {} admitted against {LIMIT}",
                PROCESSES * REQUESTS
            );
        }
    }
    panic!("the naive window never let more than {LIMIT} through: {seen:?}");
}

/// Starts the workers, lets them all go at once, returns what each printed.
fn run_workers(server: &PgServer, role: &str) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let mut workers: Vec<Child> = (0..PROCESSES)
        .map(|_| {
            Command::new(&exe)
                .env(WORKER_VAR, role)
                .env("TOLLGATE_PG_URL", server.url())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut readers: Vec<_> = workers
        .iter_mut()
        .map(|w| BufReader::new(w.stdout.take().unwrap()))
        .collect();
    for reader in &mut readers {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "a worker failed to start");
    }
    for worker in &mut workers {
        worker.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    }
    let outputs = readers
        .into_iter()
        .map(|mut reader| {
            let mut out = String::new();
            std::io::Read::read_to_string(&mut reader, &mut out).unwrap();
            out
        })
        .collect();
    for mut worker in workers {
        assert!(worker.wait().unwrap().success(), "a worker failed");
    }
    outputs
}

/// One worker process: connect, say ready, wait for go, then decide.
async fn worker(role: &str) {
    let url = std::env::var("TOLLGATE_PG_URL").unwrap();
    let (mode, arg) = role.split_once(' ').unwrap();
    let go = || {
        println!("ready");
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
    };
    if mode == "naive" {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let window = NaiveWindow::create(&client, NAIVE_TABLE, LIMIT as i64)
            .await
            .unwrap();
        go();
        let mut admitted = 0;
        for _ in 0..REQUESTS {
            admitted += window.check(&client, arg).await.unwrap() as u64;
        }
        println!("{admitted}");
        return;
    }
    let pg = PostgresConfig::new(&url)
        .prefix(arg)
        .pool_size(1)
        .migrate(false)
        .cleanup_every(None)
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .unwrap();
    go();
    for algorithm in Algorithm::ALL {
        let policy = policy(algorithm);
        let policy = pg.prepare(&policy).unwrap();
        let mut admitted = 0;
        for _ in 0..REQUESTS {
            admitted += pg.check("one-key", &policy, 1).await.unwrap().allowed as u64;
        }
        println!("{algorithm} {admitted}");
    }
}
