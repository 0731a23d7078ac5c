//! The gRPC listener: HTTP/2 within the HTTP listeners' bounds, as far as
//! HTTP/2 has room for them.
//!
//! | bound | answer | `reason` |
//! |---|---|---|
//! | more than `max_connections` open | server preface and GOAWAY (`ENHANCE_YOUR_CALM`, "too many connections"), closed at once | `too_many_connections` |
//! | no whole first request (preface and HEADERS) within `header_timeout` of the accept | GOAWAY, closed | `header_timeout` |
//! | no stream open for `idle_timeout` | GOAWAY, closed | `idle` |
//! | more than `max_concurrent_streams` streams at once on a connection | announced in SETTINGS (clients queue); a stream beyond it is reset (`REFUSED_STREAM`) | not counted |
//! | a header list over `max_header_bytes` | 431 on that stream (h2 itself) | not counted |
//!
//! HTTP/2 has no status to answer before a request, hence a GOAWAY where
//! HTTP/1.1 answers 503 or 408: it names the last stream the server
//! handles (none for a refused connection), so a client knows what it may
//! send again. After a GOAWAY the connection has [`GOAWAY_GRACE`] to close
//! (the client acknowledges it, the streams that crossed it finish); a
//! client that never finished its preface, or does not answer, is cut then.
//!
//! A request takes the connection's clock out of both bounds until its
//! response is written (as in [`super::clock`]), so a long call is never
//! idle. On shutdown the listener stops accepting and sends every
//! connection a GOAWAY; calls in flight finish within `drain`, then what is
//! left is closed.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::util::BoxCloneService;
use tower::ServiceExt;

use super::clock::{Clock, Expired, Finished};
use super::{accept, stopped, ListenerLimits, Tracked};
use crate::metrics;

/// Interval of HTTP/2 pings on a connection that receives nothing: Envoy
/// keeps its connection for hours, and pings find a peer that went away
/// without closing it (no answer within a third of it: closed).
const KEEPALIVE: Duration = Duration::from_secs(30);

/// Time a connection has to close after its GOAWAY, past a bound.
pub const GOAWAY_GRACE: Duration = Duration::from_secs(1);

/// HTTP/2 frame types and the error code of a refused connection.
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// A frame on stream 0, without flags.
fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    // Payloads here are a few bytes: the 24-bit length cannot overflow.
    let len = (payload.len() as u32).to_be_bytes();
    let mut out = vec![len[1], len[2], len[3], kind, 0, 0, 0, 0, 0];
    out.extend_from_slice(payload);
    out
}

/// What a connection over the bound receives: the server preface (an empty
/// SETTINGS frame, which may precede the client's) and a GOAWAY handling no
/// stream.
fn too_many_connections() -> Vec<u8> {
    let mut goaway = 0u32.to_be_bytes().to_vec();
    goaway.extend_from_slice(&ENHANCE_YOUR_CALM.to_be_bytes());
    goaway.extend_from_slice(b"too many connections");
    let mut out = frame(SETTINGS, &[]);
    out.extend(frame(GOAWAY, &goaway));
    out
}

async fn refuse(mut stream: TcpStream) {
    let _ = tokio::time::timeout(GOAWAY_GRACE, async {
        if stream.write_all(&too_many_connections()).await.is_ok()
            && stream.shutdown().await.is_ok()
        {
            // Closing with the client's preface unread would reset the
            // connection, which may discard the GOAWAY before it is read.
            let mut sink = [0u8; 256];
            while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
        }
    })
    .await;
}

/// What the listener serves: a tonic server, boxed (as tonic's own server
/// boxes it).
pub type GrpcService = BoxCloneService<Request<Incoming>, Response<tonic::body::Body>, Infallible>;

/// Serves `service` over HTTP/2 on `listener` within `limits` until
/// `shutdown` turns true, then drains. Each connection holds one of
/// `permits` (sized `max_connections`; shared by the listeners of one
/// address).
pub async fn serve(
    listener: TcpListener,
    service: GrpcService,
    limits: ListenerLimits,
    permits: Arc<Semaphore>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
        .max_concurrent_streams(limits.max_concurrent_streams)
        .keep_alive_interval(KEEPALIVE)
        .keep_alive_timeout(KEEPALIVE / 3);
    let builder = Arc::new(builder);
    // Owning the connections' tasks lets the drain bound close them.
    let mut connections = JoinSet::new();
    loop {
        let (stream, _) = tokio::select! {
            _ = stopped(&mut shutdown) => break,
            Some(_) = connections.join_next() => continue,
            accepted = accept(&listener) => accepted,
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            metrics::refused("too_many_connections");
            connections.spawn(refuse(stream));
            continue;
        };
        connections.spawn(connection(
            stream,
            Arc::clone(&builder),
            service.clone(),
            limits,
            shutdown.clone(),
            permit,
        ));
    }
    // Refuse new connections at once, while the open ones drain.
    drop(listener);
    let drained = tokio::time::timeout(limits.drain, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(drain = ?limits.drain, "gRPC connections still open after the drain bound; closing them");
    }
}

/// Serves one connection until the client closes it, a bound expires, or
/// shutdown drains it.
async fn connection(
    stream: TcpStream,
    builder: Arc<http2::Builder<TokioExecutor>>,
    service: GrpcService,
    limits: ListenerLimits,
    mut shutdown: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
) {
    // Small answers go out at once rather than wait for an ACK (Nagle).
    let _ = stream.set_nodelay(true);
    let accepted = Instant::now();
    let clock = Arc::new(Clock::new(
        accepted,
        limits.header_timeout,
        limits.idle_timeout,
    ));
    // The preface is the first request's first bytes, due from the accept:
    // the header bound runs until the first stream starts.
    clock.read(|| accepted);
    let service_clock = Arc::clone(&clock);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        service_clock.request_started();
        // Held by the future until the response exists, then by its body.
        let finished = Finished(Arc::clone(&service_clock));
        let call = service.clone().oneshot(req);
        async move {
            let response = match call.await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            Ok::<_, Infallible>(response.map(|inner| Tracked {
                inner,
                _finished: finished,
            }))
        }
    });
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let expired = clock.expired();
    tokio::pin!(expired);
    let bound = tokio::select! {
        res = conn.as_mut() => return closed(res),
        bound = &mut expired => bound,
        _ = stopped(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                res = conn.as_mut() => return closed(res),
                bound = &mut expired => bound,
            }
        }
    };
    metrics::refused(match bound {
        Expired::Header => "header_timeout",
        Expired::Idle => "idle",
    });
    conn.as_mut().graceful_shutdown();
    if let Ok(res) = tokio::time::timeout(GOAWAY_GRACE, conn).await {
        closed(res);
    }
}

fn closed(res: hyper::Result<()>) {
    if let Err(e) = res {
        tracing::debug!(error = %e, "gRPC connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_connection_gets_settings_then_a_goaway_handling_no_stream() {
        let bytes = too_many_connections();
        assert_eq!(&bytes[..9], &[0, 0, 0, SETTINGS, 0, 0, 0, 0, 0]);
        let goaway = &bytes[9..];
        let len = usize::from(goaway[2]);
        assert_eq!((goaway[3], goaway.len()), (GOAWAY, 9 + len));
        assert_eq!(&goaway[9..13], &[0, 0, 0, 0], "last stream");
        assert_eq!(&goaway[13..17], &[0, 0, 0, 0xb], "ENHANCE_YOUR_CALM");
        assert_eq!(&goaway[17..], b"too many connections");
    }
}
