//! Running the built `tollgate` binary from the integration tests.
//!
//! Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

/// A store call's deadline for the tests of what a store decides rather
/// than how fast: the default 50 ms is missed now and then on a loaded
/// two-core CI machine, which failed a test that checks exactness.
pub const PATIENT: [&str; 2] = ["--timeout", "10s"];

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

/// A free TCP port on 127.0.0.1 (free when asked; the server binds it next).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `tollgate serve` as a process with its own environment only, its log in
/// a file for failure messages, killed when dropped.
pub struct Serving {
    pub child: Child,
    log: tempfile::NamedTempFile,
    /// The HTTP API's port.
    pub http: u16,
}

impl Serving {
    /// Starts `tollgate serve ARGS` with exactly `env`, and waits until its
    /// HTTP API on `http` answers `/healthcheck`.
    pub fn start(args: &[&str], env: &[(&str, &str)], http: u16) -> Serving {
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("serve")
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap();
        let mut serving = Serving { child, log, http };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Some(status) = serving.child.try_wait().unwrap() {
                panic!("the server exited ({status}):\n{}", serving.log());
            }
            if serving.try_request("GET", "/healthcheck", "").map(|r| r.0) == Some(200) {
                return serving;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the server never answered:\n{}",
                serving.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// One request on a fresh connection to `port`: status and body.
    pub fn request_to(port: u16, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
        use std::io::Read;
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .ok()?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        conn.write_all(head.as_bytes()).ok()?;
        let mut answer = String::new();
        conn.read_to_string(&mut answer).ok()?;
        let status = answer.get(9..12)?.parse().ok()?;
        let body = answer.split_once("\r\n\r\n")?.1.to_string();
        Some((status, body))
    }

    fn try_request(&self, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
        Serving::request_to(self.http, method, path, body)
    }

    /// One request to the HTTP API, failing the test (with the log) if
    /// there is no answer.
    pub fn request(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        self.try_request(method, path, body)
            .unwrap_or_else(|| panic!("no answer to {method} {path}:\n{}", self.log()))
    }

    /// Sends signal `name` (`HUP`, `TERM`) to the server.
    pub fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(sent.success());
    }

    /// Polls `probe` every 50 ms for up to 10 s.
    pub fn wait_for(&self, what: &str, mut probe: impl FnMut() -> bool) {
        for _ in 0..200 {
            if probe() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("never: {what}\n{}", self.log());
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
