//! An HTTP/1.1 listener that survives slow and abusive clients.
//!
//! Each bound answers with its status and is counted in
//! `tollgate_server_refused_total{reason}`:
//!
//! | bound | answer | `reason` |
//! |---|---|---|
//! | request headers not complete within `header_timeout` of their first byte | 408, closed | `header_timeout` |
//! | headers over `max_header_bytes` or `max_headers` fields | 431, closed | `headers_too_large` |
//! | a body over `max_body_bytes` (by `Content-Length`, or while streaming) | 413 | `body_too_large` |
//! | a body slower than `body_pace` (see [`body`]) | 408, closed | `body_timeout` |
//! | a body with broken framing (a bad chunk) | 400, closed | `body_malformed` |
//! | more than `max_connections` open | 503, closed | `too_many_connections` |
//! | a keep-alive connection idle for `idle_timeout` (no byte of a next request) | closed | `idle` |
//!
//! The two clocks are kept apart (see [`clock`]): a client that started a
//! request has `header_timeout` to finish its head, one between requests
//! may stay `idle_timeout`.
//!
//! On shutdown the listener stops accepting, lets the requests in flight
//! finish (idle connections close at once) and gives up after `drain`.
//!
//! The gRPC listener, over HTTP/2, has the same limits where HTTP/2 allows
//! them: see [`grpc`].

mod body;
mod clock;
pub mod grpc;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;
use tollgate_http::PeerAddr;
use tower::{Service, ServiceExt};

pub(crate) use self::body::Fault;
pub use self::body::Pace;
use self::body::{FaultSlot, Guarded};
use self::clock::{Clock, Expired, Finished};
use crate::metrics;
use crate::proxy::Client;

/// A listener's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Time to receive a request's headers, from their first byte
    /// (slowloris: 408).
    pub header_timeout: Duration,
    /// Time a keep-alive connection may wait for its next request (then
    /// closed quietly).
    pub idle_timeout: Duration,
    /// Bytes of request line and headers.
    pub max_header_bytes: usize,
    /// Header fields per request.
    pub max_headers: usize,
    /// Request body bytes; `None` leaves bodies to the routes.
    pub max_body_bytes: Option<u64>,
    /// How fast a request body must arrive (slow bodies: 408).
    pub body_pace: Pace,
    /// Connections open at once.
    pub max_connections: usize,
    /// HTTP/2 streams open at once on one connection of the gRPC listener
    /// (its `SETTINGS_MAX_CONCURRENT_STREAMS`; at least 1).
    pub max_concurrent_streams: u32,
    /// How long shutdown waits for requests in flight.
    pub drain: Duration,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            header_timeout: Duration::from_secs(10),
            // As the usual proxies: nginx 75 s, Envoy 1 h, HAProxy's
            // examples 10 s to 1 min; long enough that clients polling
            // every few seconds keep their connection.
            idle_timeout: Duration::from_secs(60),
            max_header_bytes: 16 * 1024,
            max_headers: 64,
            max_body_bytes: None,
            // Apache's mod_reqtimeout default (`body=20,MinRate=500`).
            body_pace: Pace {
                timeout: Duration::from_secs(20),
                min_rate: 500,
            },
            max_connections: 4096,
            // hyper's default, between nginx's 128 and Go's 250 (Envoy and
            // gRPC's own servers set none); Envoy opens another connection
            // when its streams reach it.
            max_concurrent_streams: 200,
            drain: Duration::from_secs(10),
        }
    }
}

/// The stream, telling the connection's clock when request bytes arrive.
struct Watched {
    inner: TcpStream,
    clock: Arc<Clock>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let res = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.clock.read(Instant::now);
        }
        res
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    // Forwarded so that hyper writes head and body in one `writev`.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A response body that marks its request finished when hyper drops it,
/// which it does once the body is written to its end.
struct Tracked<B = Body> {
    inner: B,
    _finished: Finished,
}

impl<B: http_body::Body<Data = Bytes> + Unpin> http_body::Body for Tracked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Resolves once `shutdown` turns true (or its sender is gone).
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped here, before any await.
    let _ = shutdown.wait_for(|&stop| stop).await;
}

/// A bare response written on a socket hyper no longer owns.
async fn refuse(mut stream: TcpStream, status: StatusCode) {
    let head = format!(
        "HTTP/1.1 {} {}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    // The client may be gone already; nothing to do about it then.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

/// The client's fault, answered and counted; the connection then closes,
/// since the rest of the body cannot be told from a next request.
fn body_fault(fault: Fault) -> Response<Body> {
    metrics::refused(fault.reason());
    Response::builder()
        .status(fault.status())
        .header(header::CONNECTION, "close")
        .body(Body::empty())
        .expect("a static response is valid")
}

/// The next connection. A failed accept (out of file descriptors and the
/// like) pauses the loop rather than spin it.
pub(crate) async fn accept(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(pair) => return pair,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// What a listener serves: an axum `Router`, or any service of the same
/// shape (the reverse proxy's).
pub trait HttpService:
    Service<Request<Body>, Response = Response<Body>, Error = Infallible, Future: Send + 'static>
    + Clone
    + Send
    + 'static
{
}

impl<S> HttpService for S where
    S: Service<
            Request<Body>,
            Response = Response<Body>,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + 'static
{
}

/// What a listener's requests are for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Answered by the server's own routes.
    Routes,
    /// Forwarded by the reverse proxy: each request also carries its
    /// connection's client, whose `X-Forwarded-For` and `Forwarded` values
    /// are then made once per connection.
    Proxy,
}

/// Serves `router` on `listener` within `limits` until `shutdown` turns
/// true, then drains. Each connection holds one of `permits` (sized
/// `max_connections`; shared by the listeners of one address).
pub async fn serve<S: HttpService>(
    listener: TcpListener,
    router: S,
    role: Role,
    limits: ListenerLimits,
    permits: Arc<Semaphore>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            _ = stopped(&mut shutdown) => break,
            accepted = accept(&listener) => accepted,
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            metrics::refused("too_many_connections");
            tokio::spawn(refuse(stream, StatusCode::SERVICE_UNAVAILABLE));
            continue;
        };
        let router = router.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            connection(stream, peer, router, role, limits, shutdown).await;
            drop(permit);
        });
    }
    // Refuse new connections at once, while the open ones drain.
    drop(listener);
    // Every connection holds a permit: all of them back means all closed.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(limits.drain, permits.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!(drain = ?limits.drain, "connections still open after the drain bound");
    }
}

/// How a connection ended.
enum Ended {
    /// hyper closed it, maybe with an error.
    Served(hyper::Result<()>),
    /// One of the clock's bounds expired first.
    Expired(Expired),
}

/// Answers `request` through `router`, with the body bound; a body the
/// client got wrong is answered as such, whatever the router made of it.
async fn respond<S: HttpService>(
    router: S,
    mut req: Request<Incoming>,
    peer: SocketAddr,
    client: Option<Client>,
    limits: &ListenerLimits,
) -> Response<Body> {
    req.extensions_mut().insert(PeerAddr(peer));
    if let Some(client) = client {
        req.extensions_mut().insert(client);
    }
    if let Some(max) = limits.max_body_bytes {
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max) {
            return body_fault(Fault::TooLarge);
        }
    }
    // A request without a body (a GET, mostly) has nothing to bound: no
    // guard, no fault slot, and an empty body that allocates nothing.
    let fault = (!http_body::Body::is_end_stream(req.body())).then(FaultSlot::default);
    let req = match &fault {
        None => req.map(|_| Body::empty()),
        Some(fault) => {
            let (max, pace) = (limits.max_body_bytes, limits.body_pace);
            req.map(|b| Body::new(Guarded::new(b, max, pace, Arc::clone(fault))))
        }
    };
    let response = match router.oneshot(req).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    match fault.as_ref().and_then(|fault| fault.get()) {
        Some(&fault) => body_fault(fault),
        None => response,
    }
}

async fn connection<S: HttpService>(
    stream: TcpStream,
    peer: SocketAddr,
    router: S,
    role: Role,
    limits: ListenerLimits,
    mut shutdown: watch::Receiver<bool>,
) {
    // Small answers go out at once rather than wait for an ACK (Nagle).
    let _ = stream.set_nodelay(true);
    // A second handle on the socket, to answer 408 after hyper is dropped.
    let spare = stream
        .into_std()
        .and_then(|s| Ok((s.try_clone()?, s)))
        .and_then(|(spare, s)| Ok((TcpStream::from_std(spare)?, TcpStream::from_std(s)?)));
    let (spare, stream) = match spare {
        Ok(pair) => pair,
        Err(e) => {
            tracing::warn!(error = %e, "cannot set up a connection");
            return;
        }
    };
    let clock = Arc::new(Clock::new(
        Instant::now(),
        limits.header_timeout,
        limits.idle_timeout,
    ));
    let io = TokioIo::new(Watched {
        inner: stream,
        clock: Arc::clone(&clock),
    });
    let service_clock = Arc::clone(&clock);
    let client = (role == Role::Proxy).then(|| Client::new(peer));
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let router = router.clone();
        let client = client.clone();
        service_clock.request_started();
        // Held by the future until the response exists, then by its body.
        let finished = Finished(Arc::clone(&service_clock));
        async move {
            let response = respond(router, req, peer, client, &limits).await;
            Ok::<_, Infallible>(response.map(|inner| Tracked {
                inner,
                _finished: finished,
            }))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        // The clock bounds headers and idle time instead (hyper's bound
        // would be both at once).
        .header_read_timeout(None)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .max_headers(limits.max_headers);
    let mut conn = Box::pin(builder.serve_connection(io, service));
    let expired = clock.expired();
    tokio::pin!(expired);
    let ended = tokio::select! {
        res = conn.as_mut() => Ended::Served(res),
        bound = &mut expired => Ended::Expired(bound),
        _ = stopped(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                res = conn.as_mut() => Ended::Served(res),
                bound = &mut expired => Ended::Expired(bound),
            }
        }
    };
    drop(conn);
    match ended {
        Ended::Expired(Expired::Header) => {
            metrics::refused("header_timeout");
            refuse(spare, StatusCode::REQUEST_TIMEOUT).await;
        }
        // Dropping both handles closes the socket.
        Ended::Expired(Expired::Idle) => metrics::refused("idle"),
        Ended::Served(Ok(())) => {}
        // hyper answered 431 itself.
        Ended::Served(Err(e)) if e.is_parse_too_large() => metrics::refused("headers_too_large"),
        Ended::Served(Err(e)) => {
            tracing::debug!(error = %e, %peer, "connection ended with an error");
        }
    }
}
