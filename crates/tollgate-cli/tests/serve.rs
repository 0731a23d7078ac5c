//! `tollgate serve` as a process: `--check`, and SIGTERM draining a request
//! in flight before exiting.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
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

#[test]
fn sigterm_drains_a_request_in_flight_then_exits() {
    let port = free_port();
    let mut child = Command::new(BIN)
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
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut conn = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(c) => break c,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("the server never listened: {e}"),
        }
    };
    let body = r#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"ada"}]}]}"#;
    write!(
        conn,
        "POST /v1/check HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    conn.write_all(&body.as_bytes()[..5]).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    std::thread::sleep(Duration::from_millis(200));
    conn.write_all(&body.as_bytes()[5..]).unwrap();
    let mut answer = String::new();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let _ = conn.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline + Duration::from_secs(10),
            "the server did not exit"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
}
