//! `tollgate serve` as a process: `--check`, and SIGTERM draining a request
//! in flight before exiting.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, Serving};

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

#[test]
fn sigterm_drains_a_request_in_flight_then_exits() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let args = [
        "--config",
        EXAMPLE,
        "--no-grpc",
        "--no-watch",
        "--log-format",
        "json",
        "--http-listen",
        &listen,
        "--drain-timeout",
        "5s",
    ];
    let mut server = Serving::start(&args, &[], port);
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
    server.signal("TERM");
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
