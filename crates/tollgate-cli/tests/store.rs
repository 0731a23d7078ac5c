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
    String::from_utf8(out.stdout).unwrap()
}

/// A deterministic trace with microsecond times: bursts, gaps, a late
/// arrival, costs 0 to 4, three keys.
fn trace() -> String {
    let mut out = String::from("t_ns,key,cost\n");
    let mut t: u64 = 0;
    for i in 0u64..200 {
        t += [0, 1_000, 37_000, 250_000, 0, 3_000_000][(i % 6) as usize] * (1 + i % 4);
        let at = if i % 17 == 0 {
            t.saturating_sub(50_000)
        } else {
            t
        };
        out.push_str(&format!("{at},k{},{}\n", i % 3, (i * 7) % 5));
    }
    out
}

fn ceil_us(ns: &str) -> String {
    match ns.parse::<i64>().unwrap() {
        -1 => "-1".into(),
        n => ((n + 999) / 1000 * 1000).to_string(),
    }
}

#[test]
fn replay_through_redis_matches_the_in_process_replay_line_by_line() {
    if skip_requested() {
        return;
    }
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let trace = trace();
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
        ];
        let local = tollgate(&args, &trace);
        let url = server.url();
        let stored = tollgate(&[&args[..], &["--store", &url]].concat(), &trace);
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
            tollgate(&[&args[..], &["--store", &url]].concat(), &trace),
            stored
        );
    }
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
