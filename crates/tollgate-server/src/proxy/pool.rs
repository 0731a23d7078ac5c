//! Kept-alive HTTP/1.1 connections to the upstream.
//!
//! A stack of idle connections behind a short lock: a request takes the
//! one used last (warm, and the oldest are left to expire), and its
//! response body puts it back once read to its end. hyper-util's legacy
//! client does the same with a pool keyed by host, a checkout future and a
//! task per returned connection; profiled under load those were a visible
//! share of the proxy's CPU, for one upstream that needs none of it.

use std::collections::VecDeque;
use std::error::Error as StdError;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::net::TcpStream;

/// How long an idle connection is kept (the legacy client's default).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle connections kept at most; more are closed when put back.
const MAX_IDLE: usize = 1024;

/// Why a request could not be sent.
pub(crate) type SendError = Box<dyn StdError + Send + Sync>;

/// The connections to one upstream.
pub(crate) struct Pool {
    /// `host:port`, resolved on each new connection.
    addr: String,
    /// Most recently used last.
    idle: Mutex<VecDeque<Idle>>,
}

struct Idle {
    sender: SendRequest<Body>,
    since: Instant,
}

impl Pool {
    /// A pool of connections to `addr` (`host:port`).
    pub(crate) fn new(addr: String) -> Arc<Self> {
        Arc::new(Pool {
            addr,
            idle: Mutex::new(VecDeque::new()),
        })
    }

    /// Sends `request` (origin-form, with its `Host`) on an idle connection
    /// or a new one. A request a reused connection refused before writing
    /// it (the upstream closed it meanwhile) is sent again on another.
    pub(crate) async fn send(
        self: &Arc<Self>,
        mut request: Request<Body>,
    ) -> Result<Response<Body>, SendError> {
        loop {
            let (mut sender, reused) = match self.take() {
                Some(sender) => (sender, true),
                None => (self.connect().await?, false),
            };
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let (parts, body) = response.into_parts();
                    let body = Returning {
                        body,
                        done: false,
                        back: Some((Arc::clone(self), sender)),
                    };
                    return Ok(Response::from_parts(parts, Body::new(body)));
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) if reused => request = unsent,
                    _ => return Err(e.into_error().into()),
                },
            }
        }
    }

    /// The idle connection used last, if one is still open.
    fn take(&self) -> Option<SendRequest<Body>> {
        let mut idle = self.idle.lock();
        while let Some(Idle { sender, .. }) = idle.pop_back() {
            if sender.is_ready() {
                return Some(sender);
            }
        }
        None
    }

    async fn connect(&self) -> Result<SendRequest<Body>, SendError> {
        let stream = TcpStream::connect(&*self.addr).await?;
        // Small requests go out at once rather than wait for an ACK.
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        Ok(sender)
    }

    /// Keeps `sender` for a next request, once its connection is ready
    /// for one.
    fn put(self: Arc<Self>, mut sender: SendRequest<Body>) {
        if sender.is_ready() {
            self.push(sender);
        } else if !sender.is_closed() {
            // The connection has not yet taken in the end of the exchange
            // (the request body may still be going out): wait on the side.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    if sender.ready().await.is_ok() {
                        self.push(sender);
                    }
                });
            }
        }
    }

    fn push(&self, sender: SendRequest<Body>) {
        let now = Instant::now();
        let mut idle = self.idle.lock();
        while idle
            .front()
            .is_some_and(|oldest| now.duration_since(oldest.since) >= IDLE_TIMEOUT)
        {
            idle.pop_front();
        }
        if idle.len() < MAX_IDLE {
            idle.push_back(Idle { sender, since: now });
        }
    }
}

/// The upstream's response body, giving its connection back to the pool
/// when dropped after its end. A body dropped before its end closes the
/// connection instead (HTTP/1.1 cannot skip the rest).
struct Returning {
    body: Incoming,
    done: bool,
    back: Option<(Arc<Pool>, SendRequest<Body>)>,
}

impl http_body::Body for Returning {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let frame = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(None) = frame {
            this.done = true;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        if let Some((pool, sender)) = self.back.take() {
            if self.done || http_body::Body::is_end_stream(&self.body) {
                pool.put(sender);
            }
        }
    }
}
