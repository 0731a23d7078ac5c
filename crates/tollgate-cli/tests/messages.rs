//! What `tollgate` prints when things go wrong: each cause once, input with
//! its control characters escaped, nothing at all for a closed pipe.

use std::io::{BufRead, BufReader, Write};

mod common;

const GCRA: [&str; 3] = ["gcra", "1", "1s"];

fn stderr_of(args: &[&str], stdin: &str) -> (Option<i32>, String) {
    let out = common::run(args, stdin);
    (
        out.status.code(),
        String::from_utf8(out.stderr).expect("messages are UTF-8"),
    )
}

/// `tollgate replay ... | head -1`: the reader leaves after one line.
#[test]
fn a_closed_output_pipe_ends_the_run_quietly() {
    let mut child = common::spawn(&common::replay_args(GCRA, &[]));
    let mut input = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let mut trace = String::from("t_ns,key,cost\n");
        for t in 0..200_000 {
            trace += &format!("{t},k,1\n");
        }
        // The run stops reading once its output is gone.
        let _ = input.write_all(trace.as_bytes());
    });
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("t_ns,key,cost,allowed"), "{first}");
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert_eq!(out.status.code(), Some(141));
}

#[test]
fn an_io_error_is_named_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let (code, stderr) = stderr_of(&common::replay_args(GCRA, &["--input", path]), "");
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr,
        "tollgate: reading the trace: Is a directory (os error 21)\n"
    );
}

/// Terminal escapes and carriage returns from a trace, a file name or a
/// flag come out as visible escapes, never as the bytes themselves.
#[test]
fn control_characters_from_the_input_are_escaped() {
    let title = "\x1b]0;owned\x07";
    let (code, stderr) = stderr_of(
        &common::replay_args(GCRA, &[]),
        &format!("t_ns,key,cost\n1,a,{title}\r\n"),
    );
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr,
        "tollgate: line 2: cost `\\x1b]0;owned\\x07` is not a non-negative integer\n"
    );
    let (_, stderr) = stderr_of(&common::replay_args(GCRA, &[]), "t_ns,key,cost\r\r\n");
    assert!(stderr.contains("bad header `t_ns,key,cost\\r`"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("in\rput\x1b[2J.csv");
    let missing = missing.to_str().unwrap();
    let (_, stderr) = stderr_of(&common::replay_args(GCRA, &["--input", missing]), "");
    assert!(stderr.contains("in\\rput\\x1b[2J.csv"), "{stderr}");

    let flag = [
        "replay",
        "--algorithm",
        "gc\x1b[31mra",
        "--limit",
        "1",
        "--period",
        "1s",
    ];
    let (code, stderr) = stderr_of(&flag, "");
    assert_eq!(code, Some(2));
    assert!(stderr.contains("gc\\x1b[31mra"), "{stderr}");

    for (_, stderr) in [
        stderr_of(
            &common::replay_args(GCRA, &[]),
            &format!("t_ns,key,cost\n1,a,{title}\r\n"),
        ),
        stderr_of(&common::replay_args(GCRA, &["--input", missing]), ""),
        stderr_of(&flag, ""),
    ] {
        let raw: Vec<char> = stderr
            .chars()
            .filter(|&c| c.is_control() && c != '\n')
            .collect();
        assert!(raw.is_empty(), "{stderr:?}");
    }
}
