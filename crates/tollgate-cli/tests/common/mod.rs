//! Running the built `tollgate` binary from the integration tests.
//!
//! Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

/// Starts `tollgate` with `args`, every standard stream piped.
pub fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tollgate binary runs")
}

/// Runs `tollgate` with `args`, feeding `stdin`, and returns what it did.
pub fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = spawn(args);
    // Fed from another thread: the child writes while it reads, and a full
    // stdout pipe would otherwise deadlock against a full stdin pipe.
    let mut pipe = child.stdin.take().unwrap();
    let stdin = stdin.to_owned();
    let feeder = std::thread::spawn(move || {
        // A run that fails before reading all of it closes stdin early.
        let _ = pipe.write_all(stdin.as_bytes());
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    out
}

/// `replay` through one rule, `extra` flags after it.
pub fn replay_args<'a>(rule: [&'a str; 3], extra: &[&'a str]) -> Vec<&'a str> {
    let [algorithm, limit, period] = rule;
    let mut args = vec![
        "replay",
        "--algorithm",
        algorithm,
        "--limit",
        limit,
        "--period",
        period,
    ];
    args.extend_from_slice(extra);
    args
}

/// The names in `dir`, sorted.
pub fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}
