//! `tollgate migrate`, `replay --store` and `check --store` against a
//! PostgreSQL server started by the test on a free port.

use tollgate_core::Algorithm;
use tollgate_postgres::harness::{skip_requested, PgServer};

mod common;

/// Standard output of a `tollgate` run that must succeed.
fn stdout_of(args: &[&str], stdin: &str) -> String {
    let out = common::run(args, stdin);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tollgate {args:?}: {err}");
    String::from_utf8(out.stdout).unwrap()
}

/// Bursts, gaps, late arrivals and costs 0 to 4 over three keys, at times
/// that are no whole microseconds.
fn trace() -> String {
    let mut t: u64 = 0;
    let lines = (0u64..200).map(|i| {
        t += [0, 1_013, 37_001, 250_000, 0, 3_000_003][(i % 6) as usize] * (1 + i % 4);
        let at = if i % 17 == 0 {
            t.saturating_sub(50_000)
        } else {
            t
        };
        format!("{at},k{},{}\n", i % 3, (i * 7) % 5)
    });
    std::iter::once("t_ns,key,cost\n".to_string())
        .chain(lines)
        .collect()
}

#[test]
fn migrate_then_replay_and_check_through_postgres() {
    if skip_requested() {
        return;
    }
    let server = PgServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let migrate = ["migrate", "--store", url.as_str()];
    let version = tollgate_postgres::SCHEMA_VERSION;
    assert_eq!(
        stdout_of(&migrate, "").trim(),
        format!("tollgate.state: schema migrated from version 0 to {version}")
    );
    assert_eq!(
        stdout_of(&migrate, "").trim(),
        format!("tollgate.state: schema already at version {version}")
    );

    // Replays through PostgreSQL are exact: the in-process output, byte for byte.
    let trace = trace();
    for algorithm in Algorithm::ALL {
        let rule = [
            "--algorithm",
            algorithm.name(),
            "--limit",
            "5",
            "--period",
            "999999937ns",
        ];
        let local: Vec<&str> = [&["replay"][..], &rule, &["--burst", "3"]].concat();
        let stored: Vec<&str> = [&local[..], &["--store", &url], &common::PATIENT].concat();
        assert_eq!(
            stdout_of(&local, &trace),
            stdout_of(&stored, &trace),
            "{algorithm}"
        );
    }

    let check = [
        "check",
        "--store",
        &url,
        common::PATIENT[0],
        common::PATIENT[1],
        "--algorithm",
        "fixed_window",
        "--limit",
        "1",
        "--period",
        "1d",
        "k",
    ];
    assert!(stdout_of(&check, "").starts_with(
        "{\"allowed\":true,\"limit\":1,\"period_ns\":86400000000000,\"burst\":null,\"capacity\":1,\"remaining\":0,"
    ));
    // Denied: exit status 1, the decision still printed.
    let denied = common::run(&check, "");
    assert_eq!(denied.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&denied.stdout).starts_with("{\"allowed\":false,"));
}

#[test]
fn a_bad_store_is_an_error_that_hides_the_password() {
    let out = common::run(
        &[
            "migrate",
            "--store",
            "postgres://app:s3cret@127.0.0.1:1/app",
        ],
        "",
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("postgres://***@127.0.0.1:1/app"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
    let out = common::run(&["migrate", "--store", "redis://127.0.0.1:1"], "");
    assert!(String::from_utf8_lossy(&out.stderr).contains("for PostgreSQL stores"));
}
