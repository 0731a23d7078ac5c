//! Running the built `tollgate` binary from the integration tests.

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs `tollgate` with `args`, feeding `stdin`, and returns what it did.
pub fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tollgate binary runs");
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
