//! `tollgate serve` as a process: `--check`, and SIGTERM draining a request
//! in flight before exiting.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/limits.yaml");

#[test]
fn check_prints_meanings_and_fails_on_errors() {
    let ok = Command::new(BIN)
        .args(["serve", "--check", EXAMPLE])
        .output()
        .unwrap();
    assert!(ok.status.success());
    let out = String::from_utf8(ok.stdout).unwrap();
    assert!(
        out.contains("api.plan_free: token bucket: 30 per 90 seconds, bursts of 10"),
        "{out}"
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: { unit: second }\n",
    )
    .unwrap();
    let err = Command::new(BIN)
        .arg("serve")
        .arg("--check")
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!err.status.success());
    let msg = String::from_utf8(err.stderr).unwrap();
    assert!(
        msg.contains("bad.yaml:4:17: missing `requests_per_unit`"),
        "{msg}"
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The server process, killed if the test panics, with its log kept for the
/// failure message.
struct Server {
    child: Child,
    log: tempfile::NamedTempFile,
}

impl Server {
    fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a whole `GET /healthz` exchange on a fresh connection gets a 200:
/// a bare TCP connect is not enough, since the port may be briefly taken by
/// someone else (even a self-connect of ours) while the server starts.
fn healthy(port: u16) -> bool {
    let Ok(mut conn) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    if conn
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

#[test]
fn sigterm_drains_a_request_in_flight_then_exits() {
    let port = free_port();
    let log = tempfile::NamedTempFile::new().unwrap();
    let child = Command::new(BIN)
        .args([
            "serve",
            "--config",
            EXAMPLE,
            "--no-grpc",
            "--no-watch",
            "--log-format",
            "json",
        ])
        .args([
            "--http-listen",
            &format!("127.0.0.1:{port}"),
            "--drain-timeout",
            "5s",
        ])
        .stdin(Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    let mut server = Server { child, log };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !healthy(port) {
        if let Some(status) = server.child.try_wait().unwrap() {
            panic!(
                "the server exited ({status}) before serving:\n{}",
                server.log()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the server never answered /healthz:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let body = r#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"ada"}]}]}"#;
    let head = format!(
        "POST /v1/check HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let sent = conn
        .write_all(head.as_bytes())
        .and_then(|()| conn.write_all(&body.as_bytes()[..5]));
    if let Err(e) = sent {
        panic!("cannot send the request's start: {e}\n{}", server.log());
    }
    // The request is in flight (headers read, body incomplete) when the
    // signal arrives; the server must finish it before exiting.
    std::thread::sleep(Duration::from_millis(200));
    let killed = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    std::thread::sleep(Duration::from_millis(200));
    if let Err(e) = conn.write_all(&body.as_bytes()[5..]) {
        panic!("cannot send the request's end: {e}\n{}", server.log());
    }
    let mut answer = String::new();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let _ = conn.read_to_string(&mut answer);
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "{answer}\n{}",
        server.log()
    );
    let exit_by = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < exit_by,
            "the server did not exit:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}\n{}", server.log());
}
