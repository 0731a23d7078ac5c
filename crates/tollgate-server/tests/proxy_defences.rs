//! What the reverse proxy defends against, through a real server and a real
//! upstream on 127.0.0.1 (raw sockets where a client library would tidy the
//! request up): absolute-form targets, unnormalised paths, free costs,
//! clients behind trusted proxies, the form of `X-Forwarded-For`, and
//! bodies that are too large, malformed or too slow.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::Request;
use axum::{Json, Router};
use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate_server::server::ProxyOptions;

/// A rule none of the tests' requests match, for those about forwarding.
const UNRELATED: &str = "
http:
  rules:
    - name: elsewhere
      match: { path_prefix: /elsewhere }
      limit: { unit: minute, requests_per_unit: 1 }
";

/// An upstream that answers every request with what it received: the
/// target, the headers, and the body's length.
async fn echo() -> SocketAddr {
    let app = Router::new().fallback(|req: Request| async move {
        let target = req.uri().to_string();
        let headers: serde_json::Map<String, serde_json::Value> = req
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").into()))
            .collect();
        let mut body = req.into_body().into_data_stream();
        let mut length = 0;
        while let Some(Ok(chunk)) = body.next().await {
            length += chunk.len();
        }
        Json(serde_json::json!({"target": target, "headers": headers, "length": length}))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// A proxy with `yaml`'s rules in front of a fresh echo upstream.
async fn proxy(
    yaml: &str,
    tweak: impl FnOnce(&mut tollgate_server::server::ServeOptions),
) -> support::TestServer {
    let upstream = format!("http://{}", echo().await);
    support::start_with(yaml, move |o| {
        o.grpc = None;
        o.proxy = Some(ProxyOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            upstream,
            timeout: Duration::from_secs(30),
        });
        tweak(o);
    })
    .await
}

/// Writes `head` (and `body`) as they are on a new connection to `addr`
/// and reads the whole response (the request asks to close).
async fn raw(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// `GET target` with `host`, the answer's status and, when it came from
/// the upstream, what the upstream saw.
async fn get(server: &support::TestServer, target: &str, host: &str) -> (u16, serde_json::Value) {
    let head = format!("GET {target} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    let (status, text) = raw(server.running.proxy.unwrap(), &head, b"").await;
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or_default())
}

#[tokio::test]
async fn an_absolute_form_target_is_decided_and_forwarded_on_its_own_host() {
    let server = proxy(
        "
http:
  rules:
    - name: api-host
      match: { host: api.example.com }
      key: { constant: all }
      limit: { unit: minute, requests_per_unit: 1 }
",
        |_| {},
    )
    .await;
    // The target names another host: not the limited one, and the upstream
    // is asked for that other host, never for api.example.com.
    for _ in 0..3 {
        let (status, seen) = get(&server, "http://other.example/x", "api.example.com").await;
        assert_eq!(status, 200, "{seen}");
        assert_eq!(seen["headers"]["host"], "other.example");
        assert_eq!(seen["target"], "/x");
    }
    // The target names the limited host, whatever `Host` says.
    let (status, seen) = get(&server, "http://API.example.com/x", "other.example").await;
    assert_eq!(status, 200, "{seen}");
    assert_eq!(seen["headers"]["host"], "api.example.com");
    assert_eq!(
        get(&server, "http://api.example.com/y", "other.example")
            .await
            .0,
        429
    );
    server.running.shutdown().await;
}

#[tokio::test]
async fn unnormalised_paths_are_decided_and_forwarded_normalised() {
    let server = proxy(
        "
http:
  rules:
    - name: v1
      match: { path_prefix: /v1 }
      key: { constant: all }
      limit: { unit: minute, requests_per_unit: 1 }
",
        |_| {},
    )
    .await;
    let (status, seen) = get(&server, "/%761/./a?q=%2F", "h").await;
    assert_eq!(status, 200, "{seen}");
    assert_eq!(seen["target"], "/v1/a?q=%2F", "forwarded as decided");
    for path in [
        "/v1/a",
        "//v1/a",
        "/./v1/a",
        "/x/../v1/a",
        "/%761/a",
        "/v1//a",
    ] {
        assert_eq!(
            get(&server, path, "h").await.0,
            429,
            "{path} passed the rule on /v1"
        );
    }
    // No single meaning: refused, never forwarded.
    for path in ["/v1%2Fa", "/%2Fv1/a", "/v1/%zz", "/v1%5Ca"] {
        assert_eq!(get(&server, path, "h").await.0, 400, "{path}");
    }
    // Elsewhere, untouched by the rule.
    let (status, seen) = get(&server, "/v10/../other//x", "h").await;
    assert_eq!((status, &seen["target"]), (200, &"/other/x".into()));
    let metrics = support::get_metrics_text().1;
    assert!(
        metrics.contains(r#"tollgate_server_refused_total{reason="bad_target"}"#),
        "{metrics}"
    );
    server.running.shutdown().await;
}

#[tokio::test]
async fn a_client_chosen_cost_is_never_free() {
    let server = proxy(
        "
http:
  rules:
    - name: by-header
      match: { path_prefix: /header }
      key: { constant: h }
      cost: { header: x-cost }
      limit: { unit: minute, requests_per_unit: 2 }
    - name: by-length
      match: { path_prefix: /length }
      key: { constant: l }
      cost: content_length
      limit: { unit: minute, requests_per_unit: 1 }
    - name: floor
      match: { path_prefix: /floor }
      key: { constant: f }
      cost: { header: x-cost }
      min_cost: 2
      limit: { unit: minute, requests_per_unit: 3 }
",
        |_| {},
    )
    .await;
    let addr = server.running.proxy.unwrap();
    let with_cost = |path: &str, cost: &str| {
        format!("GET {path} HTTP/1.1\r\nhost: h\r\nx-cost: {cost}\r\nconnection: close\r\n\r\n")
    };
    assert_eq!(raw(addr, &with_cost("/header", "2"), b"").await.0, 200);
    for _ in 0..3 {
        assert_eq!(raw(addr, &with_cost("/header", "0"), b"").await.0, 429);
    }
    let empty =
        "POST /length HTTP/1.1\r\nhost: h\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
    assert_eq!(raw(addr, empty, b"").await.0, 200);
    assert_eq!(raw(addr, empty, b"").await.0, 429, "an empty body costs 1");
    // A floor of 2: a cost of 1 is charged 2, so the second does not fit in 3.
    assert_eq!(raw(addr, &with_cost("/floor", "1"), b"").await.0, 200);
    assert_eq!(raw(addr, &with_cost("/floor", "1"), b"").await.0, 429);
    server.running.shutdown().await;
}

#[test]
fn a_floor_of_zero_is_refused() {
    let e = tollgate_server::config::Config::parse(
        "f.yaml",
        "http:\n  rules:\n    - name: r\n      cost: { header: x-cost }\n      min_cost: 0\n      limit: { unit: minute, requests_per_unit: 3 }\n",
    )
    .unwrap_err();
    assert_eq!(
        (e.line, e.message.as_str()),
        (5, "`min_cost` must be at least 1")
    );
}

#[tokio::test]
async fn clients_behind_trusted_proxies_each_have_their_own_budget() {
    let server = proxy(
        "
http:
  client_ip:
    trusted_proxies: [127.0.0.0/8]
    header: x_forwarded_for
  rules:
    - name: per-client
      match: { path_prefix: /a }
      key: { ip: {} }
      limit: { unit: minute, requests_per_unit: 1 }
    - name: per-network
      match: { path_prefix: /b }
      client_ip:
        trusted_proxies: [127.0.0.1/32]
        header: forwarded
      key: { ip: { v6: 48 } }
      limit: { unit: minute, requests_per_unit: 1 }
",
        |_| {},
    )
    .await;
    let addr = server.running.proxy.unwrap();
    let via = |path: &str, field: &str| {
        format!("GET {path} HTTP/1.1\r\nhost: h\r\n{field}\r\nconnection: close\r\n\r\n")
    };
    let xff = |ip: &str| via("/a", &format!("x-forwarded-for: 6.6.6.6, {ip}"));
    assert_eq!(raw(addr, &xff("203.0.113.1"), b"").await.0, 200);
    assert_eq!(
        raw(addr, &xff("203.0.113.2"), b"").await.0,
        200,
        "another client"
    );
    assert_eq!(
        raw(addr, &xff("203.0.113.1"), b"").await.0,
        429,
        "the same client"
    );
    // This rule's own proxies write `Forwarded`; a /48 is one client.
    let fwd = |ip: &str| via("/b", &format!("forwarded: for=\"[{ip}]\""));
    assert_eq!(raw(addr, &fwd("2001:db8:1:1::1"), b"").await.0, 200);
    assert_eq!(
        raw(addr, &fwd("2001:db8:1:2::1"), b"").await.0,
        429,
        "same /48"
    );
    assert_eq!(
        raw(addr, &fwd("2001:db8:2::1"), b"").await.0,
        200,
        "another /48"
    );
    server.running.shutdown().await;
}

#[tokio::test]
async fn x_forwarded_for_names_an_ipv4_client_as_its_key_does() {
    // A dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d.
    let server = proxy(UNRELATED, |o| {
        o.proxy.as_mut().unwrap().listen = "[::]:0".parse().unwrap();
    })
    .await;
    let port = server.running.proxy.unwrap().port();
    let head = "GET /x HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n";
    let (status, text) = raw(SocketAddr::from(([127, 0, 0, 1], port)), head, b"").await;
    assert_eq!(status, 200, "{text}");
    let seen: serde_json::Value =
        serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(seen["headers"]["x-forwarded-for"], "127.0.0.1");
    assert!(
        seen["headers"]["forwarded"]
            .as_str()
            .unwrap()
            .starts_with("for=127.0.0.1;"),
        "{seen}"
    );
    server.running.shutdown().await;
}

/// A proxy whose bodies are bounded to 1,000 bytes, arriving within 1 s
/// plus a second per 100 bytes.
async fn bounded_proxy() -> support::TestServer {
    proxy(UNRELATED, |o| {
        o.limits.max_body_bytes = Some(1000);
        o.limits.body_pace = tollgate_server::listener::Pace {
            timeout: Duration::from_secs(1),
            min_rate: 100,
        };
    })
    .await
}

fn refused(reason: &str) -> u64 {
    let text = support::get_metrics_text().1;
    let needle = format!("tollgate_server_refused_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&needle))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test]
async fn chunked_bodies_over_the_bound_or_malformed_are_the_clients_errors() {
    let server = bounded_proxy().await;
    let addr = server.running.proxy.unwrap();
    let head =
        "POST /up HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    let (status, text) = raw(addr, head, b"3e8\r\n").await;
    assert_eq!(status, 408, "a body that stops midway: {text}");
    let before = refused("body_too_large");
    let mut over = Vec::new();
    for _ in 0..3 {
        over.extend_from_slice(b"1f4\r\n");
        over.extend_from_slice(&[b'x'; 500]);
        over.extend_from_slice(b"\r\n");
    }
    over.extend_from_slice(b"0\r\n\r\n");
    let (status, text) = raw(addr, head, &over).await;
    assert_eq!(status, 413, "{text}");
    assert!(refused("body_too_large") > before);
    let before = refused("body_malformed");
    let (status, text) = raw(addr, head, b"zz\r\nxx\r\n0\r\n\r\n").await;
    assert_eq!(status, 400, "{text}");
    assert!(refused("body_malformed") > before);
    // Within the bound, forwarded whole.
    let (status, text) = raw(
        addr,
        head,
        b"1f4\r\n"
            .iter()
            .chain(&[b'x'; 500])
            .chain(b"\r\n0\r\n\r\n")
            .copied()
            .collect::<Vec<_>>()
            .as_slice(),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(r#""length":500"#), "{text}");
    server.running.shutdown().await;
}

#[tokio::test]
async fn a_slow_upload_is_cut_with_408() {
    let server = bounded_proxy().await;
    let before = refused("body_timeout");
    let mut stream = tokio::net::TcpStream::connect(server.running.proxy.unwrap())
        .await
        .unwrap();
    stream
        .write_all(b"POST /up HTTP/1.1\r\nhost: h\r\ncontent-length: 100\r\n\r\n")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    // A byte every 200 ms: 5 bytes a second, far under 100.
    let answer = support::trickle(stream, Duration::from_millis(200)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(refused("body_timeout") > before);
    server.running.shutdown().await;
}
