//! The listener's bounds, each hit by a raw TCP client: 408, 431, 413,
//! 503, idle close, all counted; the idle bound apart from the header one;
//! and a drain that lets a request in flight finish.
//!
//! No test waits a fixed time for the server to reach a state: each waits
//! for an answer (or a `100 Continue`) that proves it.

mod support;

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CONFIG: &str = "domain: d\ndescriptors: []\n";

/// Reads until the peer closes (or 10 s pass: a bound, not an assertion).
async fn read_all(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

async fn start() -> support::TestServer {
    support::start_with(CONFIG, |o| {
        o.limits.header_timeout = Duration::from_millis(300);
        o.limits.idle_timeout = Duration::from_millis(300);
        o.limits.max_header_bytes = 8 * 1024;
        o.limits.max_headers = 16;
        o.limits.max_body_bytes = Some(1000);
        o.limits.max_connections = 3;
    })
    .await
}

async fn connect(server: &support::TestServer) -> TcpStream {
    TcpStream::connect(server.running.http.unwrap())
        .await
        .unwrap()
}

fn refused(metrics: &str, reason: &str) -> bool {
    refused_count(metrics, reason) > 0.0
}

/// The process-wide count of refusals for `reason` (other tests add to it,
/// never take from it).
fn refused_count(metrics: &str, reason: &str) -> f64 {
    let name = format!("tollgate_server_refused_total{{reason=\"{reason}\"}}");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&name))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

#[tokio::test]
async fn each_bound_answers_its_status_and_is_counted() {
    let server = start().await;

    // Slowloris: headers never finish.
    let mut slow = connect(&server).await;
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: 1")
        .await
        .unwrap();
    assert!(read_all(&mut slow).await.starts_with("HTTP/1.1 408"));

    // Headers too large, and too many.
    let mut big = connect(&server).await;
    let filler = "a".repeat(20 * 1024);
    big.write_all(
        format!("GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: {filler}\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    assert!(read_all(&mut big).await.starts_with("HTTP/1.1 431"));
    let mut many = connect(&server).await;
    let fields: String = (0..40).map(|i| format!("X-F{i}: v\r\n")).collect();
    many.write_all(format!("GET /healthz HTTP/1.1\r\nHost: t\r\n{fields}\r\n").as_bytes())
        .await
        .unwrap();
    assert!(read_all(&mut many).await.starts_with("HTTP/1.1 431"));

    // A body over the bound, by its declared length.
    let mut body = connect(&server).await;
    body.write_all(b"POST /v1/check HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n")
        .await
        .unwrap();
    assert!(read_all(&mut body).await.starts_with("HTTP/1.1 413"));

    // Idle keep-alive: closed quietly after the bound, no 408.
    let mut idle = connect(&server).await;
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let answer = read_all(&mut idle).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(!answer.contains("408"), "{answer}");

    let (_, metrics) = support::get(&server.http_url("/metrics")).await;
    for reason in [
        "header_timeout",
        "headers_too_large",
        "body_too_large",
        "idle",
    ] {
        assert!(
            refused(&metrics, reason),
            "{reason} not counted:\n{metrics}"
        );
    }
    server.running.shutdown().await;
}

/// A keep-alive connection idle for longer than the header bound keeps
/// working; it is closed quietly once idle for the idle bound.
#[tokio::test]
async fn an_idle_connection_has_its_own_bound_longer_than_the_header_one() {
    let server = support::start_with(CONFIG, |o| {
        o.limits.header_timeout = Duration::from_millis(200);
        // Long next to the 1 s pause below: only a stall of seconds could
        // close the connection before the second request.
        o.limits.idle_timeout = Duration::from_secs(5);
    })
    .await;
    let idle_before = refused_count(&support::get_metrics_text().1, "idle");
    let mut conn = connect(&server).await;
    let request = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    conn.write_all(request).await.unwrap();
    let first = read_response(&mut conn).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    // Five header bounds of silence: a bound shared with the headers would
    // have closed the connection.
    tokio::time::sleep(Duration::from_secs(1)).await;
    conn.write_all(request).await.unwrap();
    let second = read_response(&mut conn).await;
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
    // Then idle for the idle bound: closed, without a 408.
    let rest = read_all(&mut conn).await;
    assert_eq!(rest, "", "answered after the second request");
    let (_, metrics) = support::get_metrics_text();
    assert!(refused_count(&metrics, "idle") > idle_before, "{metrics}");
    server.running.shutdown().await;
}

/// Reads one response with a `Content-Length` body.
async fn read_response(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut byte = [0u8; 1];
    let read = async {
        while !out.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await.unwrap() == 0 {
                return;
            }
            out.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&out).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).await.unwrap();
        out.extend(body);
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("a response within 10 s");
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn connections_over_the_bound_get_503() {
    // Bounds far longer than the test: the held connections stay open.
    let server = support::start_with(CONFIG, |o| {
        o.limits.header_timeout = Duration::from_secs(60);
        o.limits.idle_timeout = Duration::from_secs(60);
        o.limits.max_connections = 3;
    })
    .await;
    // Three open connections hold every slot. The server accepts in order,
    // so the fourth is seen after them.
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut c = connect(&server).await;
        c.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
        held.push(c);
    }
    let mut fourth = connect(&server).await;
    assert!(read_all(&mut fourth).await.starts_with("HTTP/1.1 503"));
    drop(held);
    server.running.shutdown().await;
    let (_, metrics) = support::get_metrics_text();
    assert!(refused(&metrics, "too_many_connections"), "{metrics}");
}

#[tokio::test]
async fn workers_share_one_port_and_one_connection_bound() {
    let server = support::start_with(CONFIG, |o| {
        o.limits.header_timeout = Duration::from_secs(60);
        o.limits.idle_timeout = Duration::from_secs(60);
        o.limits.max_connections = 3;
        o.workers = 4;
    })
    .await;
    // Three connections, each answered once and kept open, hold the three
    // slots: whichever of the four workers accepted them, every
    // later connection is refused.
    let mut conns = Vec::new();
    for _ in 0..3 {
        let mut c = connect(&server).await;
        c.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .unwrap();
        let answer = read_response(&mut c).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        conns.push(c);
    }
    for _ in 0..6 {
        let mut late = connect(&server).await;
        assert!(read_all(&mut late).await.starts_with("HTTP/1.1 503"));
    }
    drop(conns);
    server.running.shutdown().await;
}

#[tokio::test]
async fn shutdown_drains_a_request_in_flight_and_stops_accepting() {
    drains_and_stops_accepting(1).await;
}

#[tokio::test]
async fn shutdown_drains_every_worker() {
    drains_and_stops_accepting(3).await;
}

async fn drains_and_stops_accepting(workers: usize) {
    let server = support::start_with(CONFIG, |o| o.workers = workers).await;
    let addr = server.running.http.unwrap();
    let mut in_flight = TcpStream::connect(addr).await.unwrap();
    let body = r#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#;
    let head = format!(
        "POST /v1/check HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    in_flight.write_all(head.as_bytes()).await.unwrap();
    // hyper sends `100 Continue` when the handler starts reading the body:
    // the request is in flight.
    let mut cont = [0u8; 25];
    tokio::time::timeout(Duration::from_secs(10), in_flight.read_exact(&mut cont))
        .await
        .expect("100 Continue within 10 s")
        .unwrap();
    assert_eq!(&cont, b"HTTP/1.1 100 Continue\r\n\r\n");
    let shutdown = tokio::spawn(server.running.shutdown());
    // The listener closes soon after; poll for it rather than guess a time.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still accepting 10 s after shutdown"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    in_flight.write_all(body.as_bytes()).await.unwrap();
    let answer = read_all(&mut in_flight).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    shutdown.await.unwrap();
}
