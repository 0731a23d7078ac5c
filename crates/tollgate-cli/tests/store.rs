//! `tollgate replay --store` and `tollgate check` against a Redis server and
//! a Redis Cluster started by the test on free ports.

use tollgate_core::Algorithm;
use tollgate_redis::harness::{skip_requested, RedisCluster, RedisServer};

mod common;

/// Runs `tollgate` with `args`, failing the test unless it succeeds.
fn tollgate(args: &[&str], stdin: &str) -> String {
    let out = common::run(args, stdin);
    assert!(
        out.status.success(),
        "tollgate {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Keys may be any bytes; both outputs compared go through the same loss.
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A deterministic trace with microsecond times: bursts, gaps, a late
/// arrival, costs 0 to 4, three keys.
fn trace() -> String {
    trace_from(0, "k")
}

/// The same shape from `start` ns, keys named `key` and a digit.
fn trace_from(start: u64, key: &str) -> String {
    let mut out = String::from("t_ns,key,cost\n");
    let mut t: u64 = start;
    for i in 0u64..200 {
        t += [0, 1_000, 37_000, 250_000, 0, 3_000_000][(i % 6) as usize] * (1 + i % 4);
        let at = if i % 17 == 0 {
            t.saturating_sub(50_000)
        } else {
            t
        };
        out.push_str(&format!("{at},{key}{},{}\n", i % 3, (i * 7) % 5));
    }
    out
}

fn ceil_us(ns: &str) -> String {
    match ns.parse::<i64>().unwrap() {
        -1 => "-1".into(),
        n => ((n + 999) / 1000 * 1000).to_string(),
    }
}

/// `trace` (any bytes, read from a file) replayed in process and through
/// `server`, every algorithm, line for line: the same decisions, durations
/// rounded up to the microsecond.
fn store_replay_matches_in_process(server: &RedisServer, trace: &[u8]) {
    let input = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(input.path(), trace).unwrap();
    let input = input.path().to_str().unwrap();
    for algorithm in Algorithm::ALL {
        let args = [
            "replay",
            "--algorithm",
            algorithm.name(),
            "--limit",
            "5",
            "--period",
            "999999937ns",
            "--burst",
            "3",
            "--input",
            input,
        ];
        let local = tollgate(&args, "");
        let url = server.url();
        let stored = tollgate(&[&args[..], &["--store", &url]].concat(), "");
        assert_eq!(local.lines().count(), stored.lines().count());
        for (n, (a, b)) in local.lines().zip(stored.lines()).enumerate().skip(1) {
            let a: Vec<&str> = a.split(',').collect();
            let b: Vec<&str> = b.split(',').collect();
            // Request, allowed and remaining identical; durations rounded up
            // to the store clock's microsecond.
            assert_eq!(a[..5], b[..5], "{algorithm} line {n}");
            assert_eq!(ceil_us(a[5]), b[5], "{algorithm} line {n} retry");
            assert_eq!(ceil_us(a[6]), b[6], "{algorithm} line {n} delay");
        }
        // A second run starts from fresh keys: same output.
        assert_eq!(
            tollgate(&[&args[..], &["--store", &url]].concat(), ""),
            stored
        );
    }
}

#[test]
fn replay_through_redis_matches_the_in_process_replay_line_by_line() {
    if skip_requested() {
        return;
    }
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    store_replay_matches_in_process(&server, trace().as_bytes());
}

/// What the in-process replay accepts, the store replays too: keys that are
/// not UTF-8, and times far beyond 2^52 microseconds (here near the end of
/// the u64 range of nanoseconds).
#[test]
fn replay_through_redis_takes_any_key_and_late_times() {
    if skip_requested() {
        return;
    }
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    // Keys `k~0` to `k~2`, then the `~` made a byte that is not UTF-8.
    let trace = trace_from(18_000_000_000_000_000_000, "k~").replace('~', "\u{1}");
    let bytes: Vec<u8> = trace
        .bytes()
        .map(|b| if b == 1 { 0xFF } else { b })
        .collect();
    assert!(std::str::from_utf8(&bytes).is_err());
    store_replay_matches_in_process(&server, &bytes);
}

/// A trace that leaves the span the store computes exactly is refused at
/// the line that leaves it, saying so.
#[test]
fn replay_through_redis_names_a_time_out_of_its_span() {
    if skip_requested() {
        return;
    }
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let trace = "t_ns,key,cost\n0,a,1\n18000000000000000000,a,1\n";
    let out = common::run(
        &[
            "replay",
            "--algorithm",
            "gcra",
            "--limit",
            "5",
            "--period",
            "1s",
            "--store",
            &server.url(),
        ],
        trace,
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 3") && err.contains("too far from the trace's first time"),
        "{err}"
    );
}

#[test]
fn check_prints_one_json_decision_on_a_server_and_a_cluster() {
    if skip_requested() {
        return;
    }
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let cluster = RedisCluster::start().unwrap_or_else(|e| panic!("{e}"));
    for url in [server.url(), cluster.url()] {
        let check = |cost: &str| {
            let args = [
                "check",
                "--store",
                &url,
                "--algorithm",
                "gcra",
                "--limit",
                "2",
                "--period",
                "1h",
                "--cost",
                cost,
                "user-1",
            ];
            tollgate(&args, "")
        };
        let first = check("1");
        assert!(
            first
                .starts_with("{\"allowed\":true,\"limit\":2,\"remaining\":1,\"retry_after_ms\":0,"),
            "{first}"
        );
        assert!(check("1").contains("\"remaining\":0"));
        let denied = check("1");
        assert!(denied.contains("\"allowed\":false"), "{denied}");
        assert!(check("3").contains("\"retry_after_ms\":-1"));
    }
}

/// A store URL's password never reaches the output, whatever goes wrong.
#[test]
fn store_credentials_never_reach_the_output() {
    if skip_requested() {
        return;
    }
    let server = RedisServer::start_with_password("right-pw").unwrap_or_else(|e| panic!("{e}"));
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let urls = [
        // Refused credentials, a closed port, an unsupported scheme.
        format!("redis://:s3cr3t-pw@127.0.0.1:{}", server.port()),
        format!("redis://user:s3cr3t-pw@127.0.0.1:{closed_port}"),
        "http://user:s3cr3t-pw@example.invalid".to_string(),
    ];
    for url in &urls {
        let out = common::run(
            &[
                "check",
                "--store",
                url,
                "--algorithm",
                "gcra",
                "--limit",
                "5",
                "--period",
                "1m",
                "k",
            ],
            "",
        );
        assert!(!out.status.success(), "{url}");
        let shown = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("***@"), "{shown}");
    }
}
