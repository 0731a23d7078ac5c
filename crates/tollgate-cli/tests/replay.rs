//! `tollgate replay` end to end: the built binary on small traces.

use std::fs;
use std::process::Output;

mod common;

use common::entries;

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;
const OUTPUT_HEADER: &str = "t_ns,key,cost,allowed,remaining,retry_after_ns,delay_ns";

/// Runs `tollgate replay` with `args`, feeding `stdin`.
fn tollgate(args: &[&str], stdin: &str) -> Output {
    let all: Vec<&str> = std::iter::once("replay")
        .chain(args.iter().copied())
        .collect();
    common::run(&all, stdin)
}

/// Replays `trace` and returns the output, failing the test on any error.
fn replay(args: &[&str], trace: &str) -> String {
    let out = tollgate(args, trace);
    assert!(
        out.status.success(),
        "tollgate {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty());
    String::from_utf8(out.stdout).unwrap()
}

/// A trace from `(t_ns, key, cost)` triples.
fn trace(requests: impl IntoIterator<Item = (u64, &'static str, u64)>) -> String {
    let mut text = String::from("t_ns,key,cost\n");
    for (t, key, cost) in requests {
        text += &format!("{t},{key},{cost}\n");
    }
    text
}

/// One parsed output line.
#[derive(Debug, PartialEq)]
struct Row {
    t_ns: u64,
    key: String,
    cost: u64,
    allowed: bool,
    remaining: u64,
    retry_after_ns: i64,
    delay_ns: u64,
}

fn rows(output: &str) -> Vec<Row> {
    let mut lines = output.lines();
    assert_eq!(lines.next(), Some(OUTPUT_HEADER));
    lines
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            assert_eq!(f.len(), 7, "{line}");
            Row {
                t_ns: f[0].parse().unwrap(),
                key: f[1].to_string(),
                cost: f[2].parse().unwrap(),
                allowed: match f[3] {
                    "1" => true,
                    "0" => false,
                    other => panic!("allowed `{other}`"),
                },
                remaining: f[4].parse().unwrap(),
                retry_after_ns: f[5].parse().unwrap(),
                delay_ns: f[6].parse().unwrap(),
            }
        })
        .collect()
}

/// The published case: 100 requests at 59.5 s, 100 at 60.5 s and 100 at 91 s,
/// 100 per minute; the figures are those of the issue, worked out by hand.
#[test]
fn three_batches_across_a_minute_boundary() {
    let batches = [59 * S + 500 * MS, 60 * S + 500 * MS, 91 * S];
    let input = trace(
        batches
            .iter()
            .flat_map(|&t| std::iter::repeat_n((t, "client", 1), 100)),
    );
    let expect = [
        ("fixed_window", [100, 100, 0]),
        ("sliding_log", [100, 0, 0]),
        ("sliding_counter", [100, 0, 51]),
        ("token_bucket", [100, 1, 51]),
        ("gcra", [100, 1, 51]),
        ("leaky_bucket", [100, 1, 51]),
    ];
    for (algorithm, want) in expect {
        let out = replay(
            &["--algorithm", algorithm, "--limit", "100", "--period", "1m"],
            &input,
        );
        let rows = rows(&out);
        assert_eq!(rows.len(), 300);
        let admitted: Vec<usize> = rows
            .chunks(100)
            .map(|batch| batch.iter().filter(|r| r.allowed).count())
            .collect();
        assert_eq!(admitted, want, "{algorithm}");
    }
}

/// The leaky queue of the issue: burst 20 at 100/min, 200 requests 5 ms
/// apart from 59.5 s: 22 admitted, the longest wait exactly `burst * T`,
/// 20 intervals of 600 ms = 12 s.
#[test]
fn leaky_queue_reports_each_release_delay() {
    let input = trace((0..200).map(|i| (59 * S + 500 * MS + i * 5 * MS, "client", 1)));
    let out = replay(
        &[
            "--algorithm",
            "leaky_queue",
            "--limit",
            "100",
            "--period",
            "60s",
            "--burst",
            "20",
        ],
        &input,
    );
    let rows = rows(&out);
    let admitted: Vec<&Row> = rows.iter().filter(|r| r.allowed).collect();
    assert_eq!(admitted.len(), 22);
    assert_eq!(admitted.iter().map(|r| r.delay_ns).max(), Some(12 * S));
    assert_eq!(admitted[0].delay_ns, 0);
    assert!(rows.iter().all(|r| r.allowed || r.delay_ns == 0));
    assert!(rows.iter().all(|r| r.allowed == (r.retry_after_ns == 0)));
}

/// Burst 0: no queue for the shaper (a request is served only when the
/// drain is free, never delayed), ignored by the windows.
#[test]
fn burst_zero_means_no_queue_and_is_ignored_by_the_windows() {
    let input = trace([
        (0, "k", 1),
        (0, "k", 1),
        (500 * MS, "k", 1),
        (S, "k", 1),
        (S, "k", 2),
    ]);
    let queue = |burst: &'static str| {
        let args = [
            "--algorithm",
            "leaky_queue",
            "--limit",
            "1",
            "--period",
            "1s",
            "--burst",
            burst,
        ];
        rows(&replay(&args, &input))
    };
    let none = queue("0");
    let allowed: Vec<bool> = none.iter().map(|r| r.allowed).collect();
    assert_eq!(allowed, [true, false, false, true, false]);
    assert!(none.iter().all(|r| r.delay_ns == 0));
    assert_eq!(none[2].retry_after_ns, 500_000_000);
    assert_eq!(none[4].retry_after_ns, -1);
    // With a queue of one, the second request waits instead.
    assert_eq!(queue("1")[1].delay_ns, S);

    for algorithm in ["fixed_window", "sliding_log", "sliding_counter"] {
        let args = ["--algorithm", algorithm, "--limit", "2", "--period", "1s"];
        let with_zero = replay(&[&args[..], &["--burst", "0"]].concat(), &input);
        assert_eq!(with_zero, replay(&args, &input), "{algorithm}");
    }
}

#[test]
fn every_input_line_gets_one_output_line_in_order() {
    let input = "t_ns,key,cost\n30,b,2\n10,a,1\n20,b,0\n10,a,7\n";
    let out = replay(
        &["--algorithm", "gcra", "--limit", "5", "--period", "1s"],
        input,
    );
    let echoed: Vec<(u64, String, u64)> = rows(&out)
        .into_iter()
        .map(|r| (r.t_ns, r.key, r.cost))
        .collect();
    assert_eq!(
        echoed,
        [
            (30, "b".into(), 2),
            (10, "a".into(), 1),
            (20, "b".into(), 0),
            (10, "a".into(), 7)
        ]
    );
    // A cost above the burst can never fit: -1.
    assert_eq!(rows(&out)[3].retry_after_ns, -1);
}

#[test]
fn replays_are_byte_identical_on_stdout_and_in_a_file() {
    let input = trace((0..500).map(|i| (i * 37 * MS, ["a", "b", "c"][i as usize % 3], i % 4)));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.csv");
    for algorithm in ["sliding_log", "sliding_counter", "gcra", "leaky_queue"] {
        let args = ["--algorithm", algorithm, "--limit", "10", "--period", "1s"];
        let first = replay(&args, &input);
        assert_eq!(replay(&args, &input), first, "{algorithm}");
        let mut with_file = args.to_vec();
        with_file.extend(["--output", file.to_str().unwrap()]);
        assert_eq!(replay(&with_file, &input), "");
        assert_eq!(fs::read_to_string(&file).unwrap(), first, "{algorithm}");
    }
}

#[test]
fn keys_do_not_share_state() {
    // Interleaving another key's traffic changes nothing for `a`.
    let alone = trace((0..60).map(|i| (i * 100 * MS, "a", 1)));
    let mixed = trace((0..60).flat_map(|i| [(i * 100 * MS, "a", 1), (i * 100 * MS, "b", 2)]));
    for algorithm in ["fixed_window", "sliding_log", "token_bucket", "leaky_queue"] {
        let args = ["--algorithm", algorithm, "--limit", "5", "--period", "1s"];
        let a_alone = rows(&replay(&args, &alone));
        let a_mixed: Vec<Row> = rows(&replay(&args, &mixed))
            .into_iter()
            .filter(|r| r.key == "a")
            .collect();
        assert_eq!(a_mixed, a_alone, "{algorithm}");
        assert!(
            a_alone.iter().any(|r| !r.allowed),
            "{algorithm} never refused"
        );
    }
}

#[test]
fn every_duration_unit_sets_the_period() {
    // One request per period: the second, at the same instant, must wait
    // exactly one period, so retry_after_ns reads the period back.
    let input = trace([(0, "k", 1), (0, "k", 1)]);
    let cases = [
        ("999999937ns", 999_999_937_i64),
        ("250us", 250_000),
        ("40ms", 40_000_000),
        ("60s", 60_000_000_000),
        ("1m", 60_000_000_000),
        ("2h", 7_200_000_000_000),
        ("366d", 31_622_400_000_000_000),
    ];
    for (period, ns) in cases {
        let out = replay(
            &["--algorithm", "gcra", "--limit", "1", "--period", period],
            &input,
        );
        assert_eq!(rows(&out)[1].retry_after_ns, ns, "{period}");
    }
}

#[test]
fn the_input_can_come_from_a_file_with_crlf_line_endings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.csv");
    fs::write(&path, "t_ns,key,cost\r\n0,k,1\r\n0,k,1").unwrap();
    let out = replay(
        &[
            "--algorithm",
            "fixed_window",
            "--limit",
            "1",
            "--period",
            "1s",
            "--input",
            path.to_str().unwrap(),
        ],
        "",
    );
    assert_eq!(
        out,
        format!("{OUTPUT_HEADER}\n0,k,1,1,0,0,0\n0,k,1,0,0,{S},0\n")
    );
}

/// Runs a failing replay three ways — to stdout, to a new `--output` and
/// over an existing `--output` — and checks the message, the exit code and
/// that no file was created or changed.
fn assert_fails(args: &[&str], stdin: &str, code: i32, message: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = tollgate(args, stdin);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    assert!(
        stderr.contains(message),
        "{args:?}: `{stderr}` lacks `{message}`"
    );

    let fresh = dir.path().join("fresh.csv");
    let kept = dir.path().join("kept.csv");
    fs::write(&kept, "precious\n").unwrap();
    for target in [&fresh, &kept] {
        let mut with_output = args.to_vec();
        with_output.extend(["--output", target.to_str().unwrap()]);
        let out = tollgate(&with_output, stdin);
        assert_eq!(out.status.code(), Some(code), "{with_output:?}");
        assert!(out.stdout.is_empty());
    }
    assert!(!fresh.exists(), "{args:?} created its output");
    assert_eq!(fs::read_to_string(&kept).unwrap(), "precious\n");
    assert_eq!(entries(dir.path()), ["kept.csv"], "{args:?} left a file");
}

const GCRA: [&str; 6] = ["--algorithm", "gcra", "--limit", "10", "--period", "1s"];

#[test]
fn malformed_lines_stop_the_run_with_their_line_number() {
    let cases = [
        ("", "empty input: expected the header `t_ns,key,cost`"),
        (
            "t_ns,key\n",
            "line 1: bad header `t_ns,key`, expected `t_ns,key,cost`",
        ),
        (
            "t_ns,key,cost\n1,a,1\n1,a\n",
            "line 3: missing field: expected 3 fields t_ns,key,cost, found 2",
        ),
        (
            "t_ns,key,cost\n1,a,1,1\n",
            "line 2: extra field: expected 3 fields t_ns,key,cost, found 4",
        ),
        ("t_ns,key,cost\n1,a,1\n\n1,a,1\n", "line 3: empty line"),
        ("t_ns,key,cost\n1,,1\n", "line 2: empty key"),
        (
            "t_ns,key,cost\nsoon,a,1\n",
            "line 2: t_ns `soon` is not a non-negative integer",
        ),
        (
            "t_ns,key,cost\n1,a,1.5\n",
            "line 2: cost `1.5` is not a non-negative integer",
        ),
        ("t_ns,key,cost\n-1,a,1\n", "line 2: t_ns `-1` is negative"),
        ("t_ns,key,cost\n1,a,-2\n", "line 2: cost `-2` is negative"),
        (
            "t_ns,key,cost\n18446744073709551616,a,1\n",
            "line 2: t_ns `18446744073709551616` is above 18446744073709551615",
        ),
    ];
    for (input, message) in cases {
        assert_fails(&GCRA, input, 1, &format!("tollgate: {message}"));
    }
    let long = format!("t_ns,key,cost\n1,{},1\n", "k".repeat(100_000));
    assert_fails(&GCRA, &long, 1, "tollgate: line 2: longer than 65536 bytes");
}

#[test]
fn a_late_malformed_line_leaves_no_partial_output() {
    // Far more than the output buffer, so decisions were written to the
    // temporary file before the error.
    let mut input = trace((0..100_000).map(|i| (i, "k", 1)));
    input += "100000,k,x\n";
    assert_fails(&GCRA, &input, 1, "tollgate: line 100002: cost `x` is not");
}

#[test]
fn bad_flags_are_refused_before_reading() {
    let quota = |limit: &'static str, period: &'static str, burst: &'static str| {
        [
            "--algorithm",
            "token_bucket",
            "--limit",
            limit,
            "--period",
            period,
            "--burst",
            burst,
        ]
    };
    let input = "t_ns,key,cost\n";
    // Usage errors (clap) exit with 2.
    assert_fails(
        &["--algorithm", "bogus", "--limit", "1", "--period", "1s"],
        input,
        2,
        "unknown algorithm `bogus`; expected one of: fixed_window,",
    );
    for (period, message) in [
        ("60", "`60` has no unit"),
        ("5sec", "`5sec` has an unknown unit"),
        ("1.5s", "`1.5s` has an unknown unit"),
        ("ms", "`ms` does not start with a number"),
        ("99999999999d", "`99999999999d` is too long"),
    ] {
        assert_fails(&quota("1", period, "1"), input, 2, message);
    }
    assert_fails(
        &quota("many", "1s", "1"),
        input,
        2,
        "invalid value 'many' for '--limit <N>'",
    );
    // Quota errors carry the core's text and exit with 1.
    for (limit, period, burst, message) in [
        ("0", "1s", "1", "invalid quota: limit must be at least 1"),
        ("1", "0s", "1", "invalid quota: period must be at least 1ns"),
        (
            "1",
            "1s",
            "0",
            "invalid quota: --burst 0 has no meaning for token_bucket: a bucket of capacity 0",
        ),
        (
            "1000000000001",
            "1s",
            "1",
            "invalid quota: limit 1000000000001 is above",
        ),
        (
            "1",
            "1s",
            "1000000000001",
            "invalid quota: burst 1000000000001 is above",
        ),
        (
            "1",
            "100000d",
            "1",
            "invalid quota: period 8640000000000000000ns is above",
        ),
        (
            "1",
            "366d",
            "1000000000",
            "invalid quota: burst 1000000000 at 1 per",
        ),
    ] {
        assert_fails(
            &quota(limit, period, burst),
            input,
            1,
            &format!("tollgate: {message}"),
        );
    }
}

#[test]
fn missing_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let nowhere = dir.path().join("no such dir").join("x.csv");
    let nowhere = nowhere.to_str().unwrap();
    let mut args = GCRA.to_vec();
    args.extend(["--input", nowhere]);
    let out = tollgate(&args, "");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .starts_with(&format!("tollgate: cannot open `{nowhere}`")));

    let mut args = GCRA.to_vec();
    args.extend(["--output", nowhere]);
    let out = tollgate(&args, "t_ns,key,cost\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .starts_with(&format!("tollgate: cannot create `{nowhere}`")));
    assert_eq!(entries(dir.path()), Vec::<String>::new());
}
