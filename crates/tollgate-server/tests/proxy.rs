//! Reverse proxy mode against a real upstream on 127.0.0.1: forwarding
//! headers, hop-by-hop removal, the HTTP layer's 429 (and rules put in and
//! out of force by a reload), 502, 504, upstream
//! connections reused, and a 100 MiB upload streamed with bounded memory.

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use tollgate_server::server::ProxyOptions;

async fn upstream() -> SocketAddr {
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .route(
            "/headers",
            get(|req: Request| async move {
                let h: serde_json::Map<String, serde_json::Value> = req
                    .headers()
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").into()))
                    .collect();
                Json(h)
            }),
        )
        .route(
            "/upload",
            post(|req: Request| async move {
                let mut body = req.into_body().into_data_stream();
                let mut total = 0u64;
                while let Some(chunk) = body.next().await {
                    total += chunk.unwrap().len() as u64;
                }
                total.to_string()
            }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "late"
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

const RULES: &str = "
http:
  rules:
    - name: per-ip
      match: { path_prefix: /limited }
      limit: { unit: minute, requests_per_unit: 2 }
";

/// A proxy whose upstream timeout no answer of a loaded machine reaches.
async fn proxy_to(upstream: &str) -> support::TestServer {
    proxy_within(upstream, Duration::from_secs(30)).await
}

/// `timeout` runs from the request to the upstream's response head, the
/// upload included.
async fn proxy_within(upstream: &str, timeout: Duration) -> support::TestServer {
    let upstream = upstream.to_string();
    support::start_with(RULES, move |o| {
        o.grpc = None;
        o.proxy = Some(ProxyOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            upstream,
            timeout,
        });
    })
    .await
}

fn proxy_url(server: &support::TestServer, path: &str) -> String {
    format!("http://{}{path}", server.running.proxy.unwrap())
}

#[tokio::test]
async fn forwards_with_forwarded_headers_and_without_hop_by_hop() {
    let up = upstream().await;
    let server = proxy_to(&format!("http://{up}")).await;
    assert_eq!(
        support::get(&proxy_url(&server, "/")).await,
        (200, "hello".into())
    );
    let (status, text, _) = support::send_with(
        "GET",
        &proxy_url(&server, "/headers"),
        "",
        &[
            ("x-forwarded-for", "203.0.113.9"),
            ("connection", "keep-alive, x-hop"),
            ("x-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("x-end-to-end", "kept"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let seen: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(seen["x-forwarded-for"], "203.0.113.9, 127.0.0.1");
    assert!(
        seen["forwarded"]
            .as_str()
            .unwrap()
            .starts_with("for=127.0.0.1;proto=http;host="),
        "{seen}"
    );
    assert_eq!(seen["x-end-to-end"], "kept");
    for gone in ["x-hop", "keep-alive"] {
        assert!(seen.get(gone).is_none(), "{gone} was forwarded: {seen}");
    }
    server.running.shutdown().await;
}

/// The forwarding fields are made once per connection and kept while its
/// `Host` stays: requests on one keep-alive connection that change their
/// `Host` each get their own, and a client's own list is still appended to.
#[tokio::test]
async fn requests_on_one_connection_each_get_their_own_host_forwarded() {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

    let up = upstream().await;
    let server = proxy_to(&format!("http://{up}")).await;
    let stream = tokio::net::TcpStream::connect(server.running.proxy.unwrap())
        .await
        .unwrap();
    let mut conn = BufReader::new(stream);
    let mut ask = async |host: &str, extra: &str| -> serde_json::Value {
        let head = format!("GET /headers HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n");
        conn.get_mut().write_all(head.as_bytes()).await.unwrap();
        let mut length = 0;
        loop {
            let mut line = String::new();
            conn.read_line(&mut line).await.unwrap();
            let line = line.trim_end().to_ascii_lowercase();
            if line.is_empty() {
                break;
            }
            if let Some(n) = line.strip_prefix("content-length:") {
                length = n.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        conn.read_exact(&mut body).await.unwrap();
        serde_json::from_slice(&body).unwrap()
    };
    let forwarded = |host: &str| format!("for=127.0.0.1;proto=http;host=\"{host}\"");
    for (host, extra, x_forwarded_for) in [
        ("a.example", "", "127.0.0.1"),
        ("a.example", "", "127.0.0.1"),
        ("b.example:8080", "", "127.0.0.1"),
        (
            "a.example",
            "X-Forwarded-For: 203.0.113.9\r\n",
            "203.0.113.9, 127.0.0.1",
        ),
    ] {
        let seen = ask(host, extra).await;
        assert_eq!(seen["host"], host, "{seen}");
        assert_eq!(seen["forwarded"], forwarded(host).as_str(), "{seen}");
        assert_eq!(seen["x-forwarded-for"], x_forwarded_for, "{seen}");
    }
    server.running.shutdown().await;
}

#[tokio::test]
async fn the_http_layer_limits_with_the_files_rules() {
    let up = upstream().await;
    let server = proxy_to(&format!("http://{up}")).await;
    let url = proxy_url(&server, "/limited");
    for _ in 0..2 {
        assert_eq!(support::get(&url).await.0, 404, "forwarded to the upstream");
    }
    let (status, _, headers) = support::send("GET", &url, "").await;
    assert_eq!(status, 429);
    assert!(headers.contains_key("retry-after") && headers.contains_key("ratelimit-policy"));
    // Another path is not limited.
    assert_eq!(support::get(&proxy_url(&server, "/")).await.0, 200);
    server.running.shutdown().await;
}

/// A configuration that limits something (a reload refuses one that limits
/// nothing), but nothing over HTTP.
const NO_HTTP_RULE: &str = "
domain: d
descriptors:
  - key: k
    rate_limit: { unit: minute, requests_per_unit: 1 }
";

/// With no HTTP rule the proxy forwards without the layer; a reload that
/// adds rules puts them in force at once, and one that removes them takes
/// them out again.
#[tokio::test]
async fn rules_added_and_removed_by_a_reload_take_effect() {
    let up = upstream().await;
    let upstream_url = format!("http://{up}");
    let server = support::start_with(NO_HTTP_RULE, move |o| {
        o.grpc = None;
        o.proxy = Some(ProxyOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            upstream: upstream_url,
            timeout: Duration::from_secs(30),
        });
    })
    .await;
    let url = proxy_url(&server, "/limited");
    let statuses = || async {
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(support::get(&url).await.0);
        }
        seen
    };
    // Forwarded, with the forwarding fields and the target's canonical form.
    let (status, text, _) = support::send("GET", &proxy_url(&server, "//./headers"), "").await;
    assert_eq!(status, 200, "{text}");
    let seen: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(seen["x-forwarded-for"], "127.0.0.1");
    assert_eq!(
        statuses().await,
        [404, 404, 404],
        "no rule, nothing refused"
    );

    let engine = &server.running.engine;
    std::fs::write(server.config_path(), RULES).unwrap();
    tollgate_server::reload::reload(engine, &server.config_path()).unwrap();
    assert_eq!(statuses().await, [404, 404, 429], "the rule in force");

    std::fs::write(server.config_path(), NO_HTTP_RULE).unwrap();
    tollgate_server::reload::reload(engine, &server.config_path()).unwrap();
    assert_eq!(statuses().await, [404, 404, 404], "the rule removed");
    server.running.shutdown().await;
}

#[tokio::test]
async fn upstream_down_is_502_and_slow_is_504() {
    // A port held by a socket that never listens: connecting is refused,
    // and no other process can listen there while the test runs.
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let closed = held.local_addr().unwrap();
    let down = proxy_to(&format!("http://{closed}")).await;
    assert_eq!(support::get(&proxy_url(&down, "/")).await.0, 502);
    down.running.shutdown().await;
    let up = upstream().await;
    // `/slow` answers after 30 s: a 504 after 300 ms.
    let slow = proxy_within(&format!("http://{up}"), Duration::from_millis(300)).await;
    assert_eq!(support::get(&proxy_url(&slow, "/slow")).await.0, 504);
    slow.running.shutdown().await;
    drop(held);
}

/// An upstream answering `hello` that counts the TCP connections it accepts.
async fn counting_upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            count.fetch_add(1, Ordering::SeqCst);
            let hello = hyper::service::service_fn(|_req| async {
                Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                    Bytes::from_static(b"hello"),
                )))
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), hello),
            );
        }
    });
    (addr, accepted)
}

#[tokio::test]
async fn upstream_connections_are_kept_alive_and_reused() {
    const REQUESTS: usize = 30;
    let (up, accepted) = counting_upstream().await;
    let server = proxy_to(&format!("http://{up}")).await;
    // Each request on a new client connection: only the proxy's own pool
    // can save upstream connections.
    for _ in 0..REQUESTS {
        assert_eq!(
            support::get(&proxy_url(&server, "/")).await,
            (200, "hello".into())
        );
    }
    // One connection would do for sequential requests; the pool gets a
    // connection back once the response is written out, which may come
    // after the client has read it, so a request may now and then find
    // none idle yet. Without reuse this would be 30.
    let opened = accepted.load(Ordering::SeqCst);
    assert!(
        (1..=REQUESTS / 5).contains(&opened),
        "{opened} upstream connections for {REQUESTS} sequential requests"
    );
    server.running.shutdown().await;
}

/// An upstream that answers one request per connection, keep-alive by its
/// headers, then closes the connection: each close is sent on the channel.
async fn closing_upstream() -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (closed, closes) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.ends_with(b"\r\n\r\n") {
                let n = stream.read(&mut buf).await.unwrap();
                assert!(n > 0, "the proxy closed before a whole request");
                head.extend_from_slice(&buf[..n]);
            }
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")
                .await
                .unwrap();
            drop(stream);
            closed.send(()).unwrap();
        }
    });
    (addr, closes)
}

#[tokio::test]
async fn an_idle_connection_the_upstream_closed_is_not_used() {
    const REQUESTS: usize = 5;
    let (up, mut closes) = closing_upstream().await;
    let server = proxy_to(&format!("http://{up}")).await;
    for _ in 0..REQUESTS {
        assert_eq!(
            support::get(&proxy_url(&server, "/")).await,
            (200, "hello".into())
        );
        // The pool holds a connection whose upstream end is now closed.
        closes.recv().await.unwrap();
    }
    server.running.shutdown().await;
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test]
async fn a_100_mib_upload_streams_through_with_bounded_memory() {
    const MIB: usize = 1024 * 1024;
    let up = upstream().await;
    let server = proxy_within(&format!("http://{up}"), Duration::from_secs(120)).await;
    let before = peak_rss_kib();
    let chunk = Bytes::from(vec![7u8; MIB]);
    let chunks =
        futures_util::stream::iter((0..100).map(move |_| {
            Ok::<_, std::convert::Infallible>(http_body::Frame::data(chunk.clone()))
        }));
    let stream = tokio::net::TcpStream::connect(server.running.proxy.unwrap())
        .await
        .unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = http::Request::post("/upload")
        .header("host", "proxy")
        .body(Body::new(StreamBody::new(chunks)))
        .unwrap();
    let res = sender.send_request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, (100 * MIB).to_string().as_bytes());
    let grown_mib = (peak_rss_kib() - before) / 1024;
    assert!(
        grown_mib < 50,
        "peak memory grew by {grown_mib} MiB for a 100 MiB body"
    );
    server.running.shutdown().await;
}
