//! The gRPC listener's bounds, each hit by a raw TCP client (or a bare h2
//! client where a stream must be open): a connection over the bound, a
//! client that sends nothing, half the preface or no request, an idle
//! connection, all counted; the generated client within the bounds; a call
//! in flight that drains on shutdown.
//!
//! No test waits a fixed time for the server to reach a state: each waits
//! for the bytes (or the close) that prove it.

mod support;

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CONFIG: &str = "
domain: d
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 1000 }
";

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const EMPTY_SETTINGS: [u8; 9] = [0, 0, 0, 0x4, 0, 0, 0, 0, 0];
const GOAWAY: u8 = 0x7;
const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Generous next to the bounds under test (300 ms): a bound, not a timing.
const CLOSED_WITHIN: Duration = Duration::from_secs(10);

async fn start(
    tweak: impl FnOnce(&mut tollgate_server::listener::ListenerLimits),
) -> support::TestServer {
    support::start_with(CONFIG, |o| {
        o.http = None;
        tweak(&mut o.limits);
    })
    .await
}

async fn connect(server: &support::TestServer) -> TcpStream {
    TcpStream::connect(server.running.grpc.unwrap())
        .await
        .unwrap()
}

/// Everything the server sends until it closes the connection; panics if
/// it is still open after [`CLOSED_WITHIN`].
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    // A reset (the server closing with bytes unread) also ends it.
    let read = tokio::time::timeout(CLOSED_WITHIN, stream.read_to_end(&mut out)).await;
    assert!(
        read.is_ok(),
        "still open after {CLOSED_WITHIN:?}; read {out:?}"
    );
    out
}

/// The types of the frames in `bytes` (a server's side of a connection).
fn frame_types(bytes: &[u8]) -> Vec<u8> {
    let mut types = Vec::new();
    let mut rest = bytes;
    while rest.len() >= 9 {
        let len = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
        types.push(rest[3]);
        rest = &rest[(9 + len).min(rest.len())..];
    }
    types
}

fn refused(reason: &str) -> f64 {
    let name = format!("tollgate_server_refused_total{{reason=\"{reason}\"}}");
    support::get_metrics_text()
        .1
        .lines()
        .find_map(|l| l.strip_prefix(&name))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

fn request(user: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: user.into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 1,
    }
}

/// A gRPC message: uncompressed flag, length, protobuf.
fn grpc_message(request: &RateLimitRequest) -> Bytes {
    let body = request.encode_to_vec();
    let mut out = BytesMut::with_capacity(5 + body.len());
    out.put_u8(0);
    out.put_u32(u32::try_from(body.len()).unwrap());
    out.put_slice(&body);
    out.freeze()
}

#[tokio::test]
async fn a_connection_over_the_bound_gets_a_goaway_and_is_counted() {
    // Bounds far longer than the test: the held connections stay open.
    let server = start(|l| {
        l.header_timeout = Duration::from_secs(60);
        l.max_connections = 2;
    })
    .await;
    let before = refused("too_many_connections");
    // Two open connections hold every slot. The server accepts in order,
    // so the third is seen after them.
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(connect(&server).await);
    }
    let mut third = connect(&server).await;
    let answer = read_until_closed(&mut third).await;
    assert!(answer.starts_with(&EMPTY_SETTINGS), "{answer:?}");
    assert_eq!(frame_types(&answer), [0x4, GOAWAY], "{answer:?}");
    assert!(answer.ends_with(b"too many connections"), "{answer:?}");
    assert!(refused("too_many_connections") > before);
    drop(held);
    server.running.shutdown().await;
}

#[tokio::test]
async fn clients_without_a_whole_request_are_closed_after_the_header_bound_and_counted() {
    let server = start(|l| l.header_timeout = Duration::from_millis(300)).await;
    let before = refused("header_timeout");
    // Nothing at all, half the preface, and the preface without a request.
    let mut silent = connect(&server).await;
    let mut half = connect(&server).await;
    half.write_all(&PREFACE[..PREFACE.len() / 2]).await.unwrap();
    let mut no_request = connect(&server).await;
    no_request.write_all(PREFACE).await.unwrap();
    no_request.write_all(&EMPTY_SETTINGS).await.unwrap();
    for stream in [&mut silent, &mut half] {
        // The server's preface, then the close: nothing to GOAWAY before
        // the client's preface.
        let answer = read_until_closed(stream).await;
        assert!(!frame_types(&answer).contains(&GOAWAY), "{answer:?}");
    }
    // A client past its preface is told with a GOAWAY.
    let answer = read_until_closed(&mut no_request).await;
    assert!(frame_types(&answer).contains(&GOAWAY), "{answer:?}");
    assert!(refused("header_timeout") >= before + 3.0);
    server.running.shutdown().await;
}

/// A bare HTTP/2 connection (h2, no gRPC layer): the tests that need a
/// stream open at a given moment drive it frame by frame.
async fn h2_client(
    server: &support::TestServer,
) -> (
    h2::client::SendRequest<Bytes>,
    h2::client::Connection<TcpStream, Bytes>,
) {
    h2::client::handshake(connect(server).await).await.unwrap()
}

fn post() -> http::Request<()> {
    http::Request::post(PATH)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

/// Reads a unary gRPC response: its message and `grpc-status`.
async fn grpc_response(response: h2::client::ResponseFuture) -> (RateLimitResponse, String) {
    let read = async {
        let response = response.await.unwrap();
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let mut bytes = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
            bytes.extend_from_slice(&chunk);
        }
        let status = body
            .trailers()
            .await
            .unwrap()
            .and_then(|t| {
                t.get("grpc-status")
                    .map(|v| v.to_str().unwrap().to_string())
            })
            .unwrap_or_default();
        (RateLimitResponse::decode(&bytes[5..]).unwrap(), status)
    };
    tokio::time::timeout(CLOSED_WITHIN, read)
        .await
        .expect("an answer within 10 s")
}

async fn call(sender: &mut h2::client::SendRequest<Bytes>, user: &str) -> RateLimitResponse {
    let (response, mut body) = sender.send_request(post(), false).unwrap();
    body.send_data(grpc_message(&request(user)), true).unwrap();
    let (answer, status) = grpc_response(response).await;
    assert_eq!(status, "0");
    answer
}

#[tokio::test]
async fn a_connection_without_a_stream_is_closed_after_the_idle_bound_and_counted() {
    let server = start(|l| l.idle_timeout = Duration::from_millis(300)).await;
    let before = refused("idle");
    let (mut sender, connection) = h2_client(&server).await;
    let connection = tokio::spawn(connection);
    let answer = call(&mut sender, "ada").await;
    assert_eq!(answer.overall_code, Code::Ok as i32);
    // Whether the client answers the GOAWAY within its grace (a clean
    // close) or not (cut), the connection ends.
    tokio::time::timeout(CLOSED_WITHIN, connection)
        .await
        .expect("closed within 10 s")
        .unwrap()
        .ok();
    assert!(refused("idle") > before);
    server.running.shutdown().await;
}

#[tokio::test]
async fn workers_share_one_port_and_one_connection_bound() {
    let server = support::start_with(CONFIG, |o| {
        o.http = None;
        o.limits.header_timeout = Duration::from_secs(60);
        o.limits.idle_timeout = Duration::from_secs(60);
        o.limits.max_connections = 2;
        o.workers = 3;
    })
    .await;
    // Two connections, each answered once and kept open, hold the two
    // slots: whichever of the three workers accepted them, every
    // later connection is refused.
    let mut held = Vec::new();
    for user in ["ada", "bob"] {
        let (mut sender, connection) = h2_client(&server).await;
        let connection = tokio::spawn(connection);
        let answer = call(&mut sender, user).await;
        assert_eq!(answer.overall_code, Code::Ok as i32);
        held.push((sender, connection));
    }
    for _ in 0..6 {
        let mut late = connect(&server).await;
        let answer = read_until_closed(&mut late).await;
        assert_eq!(frame_types(&answer), [0x4, GOAWAY], "{answer:?}");
    }
    drop(held);
    server.running.shutdown().await;
}

#[tokio::test]
async fn the_generated_client_queues_beyond_the_stream_bound_and_gets_every_answer() {
    let server = start(|l| {
        l.max_connections = 2;
        l.max_concurrent_streams = 2;
    })
    .await;
    let mut client = RateLimitServiceClient::connect(server.grpc_url())
        .await
        .unwrap();
    // A first answer proves the client has the server's SETTINGS, sent
    // first: until then it may open streams past the bound, which the
    // server refuses.
    client.should_rate_limit(request("first")).await.unwrap();
    let calls: Vec<_> = (0..20)
        .map(|i| {
            let mut client = client.clone();
            tokio::spawn(async move { client.should_rate_limit(request(&format!("u{i}"))).await })
        })
        .collect();
    for call in calls {
        let answer = call.await.unwrap().unwrap().into_inner();
        assert_eq!(answer.overall_code, Code::Ok as i32);
    }
    server.running.shutdown().await;
}

#[tokio::test]
async fn shutdown_drains_a_call_in_flight_and_stops_accepting() {
    let server = start(|_| {}).await;
    let addr = server.running.grpc.unwrap();
    let (mut sender, mut connection) = h2_client(&server).await;
    let mut ping = connection.ping_pong().unwrap();
    tokio::spawn(connection);
    // A whole call first: the connection is accepted and served.
    call(&mut sender, "ada").await;
    // Then one whose body is half sent. The server answers pings in order,
    // so once it answers this one it has the call's HEADERS: the stream is
    // open on its side.
    let message = grpc_message(&request("bob"));
    let (response, mut body) = sender.send_request(post(), false).unwrap();
    body.send_data(message.slice(..3), false).unwrap();
    tokio::time::timeout(CLOSED_WITHIN, ping.ping(h2::Ping::opaque()))
        .await
        .expect("a pong within 10 s")
        .unwrap();
    let shutdown = tokio::spawn(server.running.shutdown());
    // The listener closes soon after; poll for it rather than guess a time.
    let deadline = tokio::time::Instant::now() + CLOSED_WITHIN;
    while TcpStream::connect(addr).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still accepting 10 s after shutdown"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    body.send_data(message.slice(3..), true).unwrap();
    let (answer, status) = grpc_response(response).await;
    assert_eq!(
        (answer.overall_code, status.as_str()),
        (Code::Ok as i32, "0")
    );
    shutdown.await.unwrap();
}
