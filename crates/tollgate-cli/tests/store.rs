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
/// `server`, every algorithm with a burst of 3, and burst 0 where it is
/// accepted (no queue for the shaper, ignored by a window), line for line:
/// the same decisions, durations rounded up to the microsecond.
fn store_replay_matches_in_process(server: &RedisServer, trace: &[u8]) {
    let input = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(input.path(), trace).unwrap();
    let input = input.path().to_str().unwrap();
    let rules = Algorithm::ALL
        .map(|a| (a, "3"))
        .into_iter()
        .chain([(Algorithm::LeakyQueue, "0"), (Algorithm::FixedWindow, "0")]);
    for (algorithm, burst) in rules {
        let args = [
            "replay",
            "--algorithm",
            algorithm.name(),
            "--limit",
            "5",
            "--period",
            "999999937ns",
            "--burst",
            burst,
            "--input",
            input,
        ];
        let local = tollgate(&args, "");
        let url = server.url();
        let stored = tollgate(
            &[&args[..], &["--store", &url], &common::PATIENT].concat(),
            "",
        );
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
            tollgate(
                &[&args[..], &["--store", &url], &common::PATIENT].concat(),
                ""
            ),
            stored
        );
    }
}

/// `tollgate check` on `url` with `rule` flags, for `key` at `cost`.
fn check(url: &str, rule: &[&str], cost: &str, key: &str) -> std::process::Output {
    // The patient deadline unless the test sets its own.
    let deadline: &[&str] = if rule.contains(&"--timeout") {
        &[]
    } else {
        &common::PATIENT
    };
    let args = [
        &["check", "--store", url][..],
        deadline,
        rule,
        &["--cost", cost, key],
    ]
    .concat();
    common::run(&args, "")
}

/// The JSON of a check that exited with `status`.
fn json(out: std::process::Output, status: i32) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(status), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    String::from_utf8(out.stdout).unwrap()
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
            common::PATIENT[0],
            common::PATIENT[1],
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
    let gcra = ["--algorithm", "gcra", "--limit", "2", "--period", "1h"];
    for url in [server.url(), cluster.url()] {
        let first = json(check(&url, &gcra, "1", "user-1"), 0);
        assert_eq!(
            first,
            "{\"allowed\":true,\"limit\":2,\"period_ns\":3600000000000,\"burst\":2,\
             \"capacity\":2,\"remaining\":1,\"retry_after_ms\":0,\"reset_after_ms\":1800000,\
             \"delay_ms\":0}\n"
        );
        assert!(json(check(&url, &gcra, "1", "user-1"), 0).contains("\"remaining\":0"));
        let denied = json(check(&url, &gcra, "1", "user-1"), 1);
        assert!(denied.contains("\"allowed\":false"), "{denied}");
        assert!(json(check(&url, &gcra, "3", "user-1"), 1).contains("\"retry_after_ms\":-1"));
    }
}

#[test]
fn check_reports_the_quota_as_given_and_the_capacity_by_name() {
    if skip_requested() {
        return;
    }
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let rule = |algorithm| {
        [
            "--algorithm",
            algorithm,
            "--limit",
            "100",
            "--period",
            "1m",
            "--burst",
            "10",
        ]
    };
    let cases = [
        ("gcra", "\"burst\":10,\"capacity\":10,"),
        ("leaky_queue", "\"burst\":10,\"capacity\":11,"),
        ("sliding_log", "\"burst\":null,\"capacity\":100,"),
    ];
    for (algorithm, numbers) in cases {
        let out = json(check(&url, &rule(algorithm), "0", "k"), 0);
        let quota = "{\"allowed\":true,\"limit\":100,\"period_ns\":60000000000,";
        assert!(out.starts_with(quota), "{out}");
        assert!(out.contains(numbers), "{algorithm}: {out}");
    }
}

/// Three requests at once, 1 a minute with a queue of 2: served now, in a
/// minute and in two, as `replay` says; the fourth does not fit.
#[test]
fn check_reports_the_leaky_queue_delay() {
    if skip_requested() {
        return;
    }
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let rule = [
        "--algorithm",
        "leaky_queue",
        "--limit",
        "1",
        "--period",
        "1m",
        "--burst",
        "2",
    ];
    let delays: Vec<String> = (0..3)
        .map(|_| json(check(&server.url(), &rule, "1", "q"), 0))
        .collect();
    // The store's clock moves between calls, so a later call waits a few
    // microseconds less, never more, than a whole number of minutes.
    for (n, out) in delays.iter().enumerate() {
        let delay: u64 = out
            .split("\"delay_ms\":")
            .nth(1)
            .unwrap()
            .trim_end_matches(['}', '\n'])
            .parse()
            .unwrap();
        let minutes = n as u64 * 60_000;
        assert!(
            delay <= minutes && delay + 1_000 > minutes,
            "call {n}: {out}"
        );
    }
    assert!(json(check(&server.url(), &rule, "1", "q"), 1).contains("\"allowed\":false"));
}

#[test]
fn check_exit_status_tells_usage_errors_from_store_failures() {
    let gcra = ["--algorithm", "gcra", "--limit", "2", "--period", "1h"];
    // Nothing listens on a port just released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let closed = format!("redis://127.0.0.1:{port}");
    let out = check(&closed, &gcra, "1", "k");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(out.stdout.is_empty());
    let bad_quota = ["--algorithm", "gcra", "--limit", "0", "--period", "1h"];
    let out = check(&closed, &bad_quota, "1", "k");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = check("http://127.0.0.1:1", &gcra, "1", "k");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = check(
        &closed,
        &[&gcra[..], &["--timeout", "0s"]].concat(),
        "1",
        "k",
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
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
