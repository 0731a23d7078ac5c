//! An HTTP/1.1 listener that survives slow and abusive clients.
//!
//! Each bound answers with its status and is counted in
//! `tollgate_server_refused_total{reason}`:
//!
//! | bound | answer | `reason` |
//! |---|---|---|
//! | request headers not complete within `header_timeout` | 408, closed | `header_timeout` |
//! | headers over `max_header_bytes` or `max_headers` fields | 431, closed | `headers_too_large` |
//! | a body over `max_body_bytes` (by `Content-Length`, or while streaming) | 413 | `body_too_large` |
//! | more than `max_connections` open | 503, closed | `too_many_connections` |
//! | a keep-alive connection idle for `header_timeout` | closed | `idle` |
//!
//! The idle bound is the header bound: once a response is written, the next
//! request's headers must arrive within `header_timeout`.
//!
//! On shutdown the listener stops accepting, lets the requests in flight
//! finish (idle connections close at once) and gives up after `drain`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use http::{header, Request, Response, StatusCode};
use http_body_util::Limited;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tollgate_http::PeerAddr;
use tower::ServiceExt;

use crate::metrics;

/// A listener's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Time to receive a request's headers (and to wait on an idle
    /// keep-alive connection).
    pub header_timeout: Duration,
    /// Bytes of request line and headers.
    pub max_header_bytes: usize,
    /// Header fields per request.
    pub max_headers: usize,
    /// Request body bytes; `None` leaves bodies to the routes.
    pub max_body_bytes: Option<u64>,
    /// Connections open at once.
    pub max_connections: usize,
    /// How long shutdown waits for requests in flight.
    pub drain: Duration,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            header_timeout: Duration::from_secs(10),
            max_header_bytes: 16 * 1024,
            max_headers: 64,
            max_body_bytes: None,
            max_connections: 4096,
            drain: Duration::from_secs(10),
        }
    }
}

/// The stream, noting whether request bytes arrived since the last
/// response bytes were written: a timeout then is a slow client (408),
/// otherwise an idle one (closed quietly).
struct Watched {
    inner: TcpStream,
    partial: Arc<AtomicBool>,
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
            this.partial.store(true, Ordering::Relaxed);
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
        let this = self.get_mut();
        this.partial.store(false, Ordering::Relaxed);
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
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

fn too_large() -> Response<axum::body::Body> {
    metrics::refused("body_too_large");
    Response::builder()
        .status(StatusCode::PAYLOAD_TOO_LARGE)
        .header(header::CONNECTION, "close")
        .body(axum::body::Body::empty())
        .expect("a static response is valid")
}

/// Serves `router` on `listener` within `limits` until `shutdown` turns
/// true, then drains.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ListenerLimits,
    mut shutdown: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let accepted = tokio::select! {
            _ = stopped(&mut shutdown) => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // Out of file descriptors and the like: pause, don't spin.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            metrics::refused("too_many_connections");
            tokio::spawn(refuse(stream, StatusCode::SERVICE_UNAVAILABLE));
            continue;
        };
        let router = router.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            connection(stream, peer, router, limits, shutdown).await;
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

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    limits: ListenerLimits,
    mut shutdown: watch::Receiver<bool>,
) {
    // A second handle on the socket, to answer 408 after hyper gave up on it.
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
    let partial = Arc::new(AtomicBool::new(false));
    let io = TokioIo::new(Watched {
        inner: stream,
        partial: Arc::clone(&partial),
    });
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        let router = router.clone();
        async move {
            req.extensions_mut().insert(PeerAddr(peer));
            req.extensions_mut().insert(ConnectInfo(peer));
            let Some(max) = limits.max_body_bytes else {
                return router.oneshot(req.map(axum::body::Body::new)).await;
            };
            let declared = req
                .headers()
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if declared.is_some_and(|n| n > max) {
                return Ok::<_, Infallible>(too_large());
            }
            let limit = usize::try_from(max).unwrap_or(usize::MAX);
            router
                .oneshot(req.map(|b| axum::body::Body::new(Limited::new(b, limit))))
                .await
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .max_headers(limits.max_headers);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let result = tokio::select! {
        res = conn.as_mut() => res,
        _ = stopped(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    let Err(e) = result else { return };
    if e.is_timeout() {
        if partial.load(Ordering::Relaxed) {
            metrics::refused("header_timeout");
            refuse(spare, StatusCode::REQUEST_TIMEOUT).await;
        } else {
            metrics::refused("idle");
        }
    } else if e.is_parse_too_large() {
        // hyper answered 431 itself.
        metrics::refused("headers_too_large");
    } else {
        tracing::debug!(error = %e, %peer, "connection ended with an error");
    }
}
