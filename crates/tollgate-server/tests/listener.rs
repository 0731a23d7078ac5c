//! The listener's bounds, each hit by a raw TCP client: 408, 431, 413,
//! 503, idle close, all counted; and a drain that lets a request in flight
//! finish.

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
    metrics.lines().any(|l| {
        l.starts_with(&format!(
            "tollgate_server_refused_total{{reason=\"{reason}\"}}"
        ))
    })
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

#[tokio::test]
async fn connections_over_the_bound_get_503() {
    let server = start().await;
    // Three open connections hold every slot (each sent a partial request).
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut c = connect(&server).await;
        c.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
        held.push(c);
    }
    // Let the server accept them before the fourth.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut fourth = connect(&server).await;
    assert!(read_all(&mut fourth).await.starts_with("HTTP/1.1 503"));
    drop(held);
    server.running.shutdown().await;
    let (_, metrics) = support::get_metrics_text();
    assert!(refused(&metrics, "too_many_connections"), "{metrics}");
}

#[tokio::test]
async fn shutdown_drains_a_request_in_flight_and_stops_accepting() {
    let server = support::start(CONFIG).await;
    let addr = server.running.http.unwrap();
    let mut in_flight = TcpStream::connect(addr).await.unwrap();
    let body = r#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#;
    let head = format!(
        "POST /v1/check HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    in_flight.write_all(head.as_bytes()).await.unwrap();
    in_flight.write_all(&body.as_bytes()[..10]).await.unwrap();
    // Let the server read the head, so the request is in flight.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let shutdown = tokio::spawn(server.running.shutdown());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "still accepting after shutdown"
    );
    in_flight.write_all(&body.as_bytes()[10..]).await.unwrap();
    let answer = read_all(&mut in_flight).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    shutdown.await.unwrap();
}
