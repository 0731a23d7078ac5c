//! Kept-alive HTTP/1.1 connections to the upstream.
//!
//! A stack of idle connections behind a short lock: a request takes the
//! one used last (warm, and the oldest are left to expire), and its
//! response body puts it back once read to its end. hyper-util's legacy
//! client does the same with a pool keyed by host, a checkout future and a
//! task per returned connection; profiled under load those were a visible
//! share of the proxy's CPU, for one upstream that needs none of it.
//!
//! A connection has no task of its own: the request using it drives it
//! (its forwarding future until the response head, then the response body
//! as the listener writes it out), as nginx's event loop handles both
//! sockets of a request in one pass. With a task per connection each
//! request woke it to write, it woke the request's task with the head and
//! again with the body, and was woken once more to take the next request:
//! here the readiness of either socket wakes the one task that serves the
//! request. An idle connection is polled, without a waker, when it is
//! taken and when it is put back, which is when it notices that the
//! upstream closed it or that its exchange is over.

use std::collections::VecDeque;
use std::error::Error as StdError;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::{Connection, SendRequest};
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
    link: Link,
    since: Instant,
}

/// One connection: the handle requests are sent with, and the connection
/// itself, driven by whoever uses it.
struct Link {
    sender: SendRequest<Body>,
    /// `None` once ended.
    conn: Option<Connection<TokioIo<TcpStream>, Body>>,
}

impl Link {
    /// Moves the connection on as far as its sockets allow; ready once it
    /// has ended (closed by either side, or failed). An ended connection
    /// is dropped at once, which fails whatever still waits on it (its
    /// request's answer, its response body) rather than leave it hanging.
    fn drive(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(conn) = &mut self.conn else {
            return Poll::Ready(());
        };
        let Poll::Ready(ended) = Pin::new(conn).poll(cx) else {
            return Poll::Pending;
        };
        if let Err(e) = ended {
            tracing::debug!(error = %e, "upstream connection ended with an error");
        }
        self.conn = None;
        Poll::Ready(())
    }

    /// Whether it can take a next request now. Driven once first, with no
    /// task to wake (nothing waits on an idle connection): that is when it
    /// sees an end of exchange or a close that came while nobody drove it.
    fn ready_now(&mut self) -> bool {
        self.drive(&mut Context::from_waker(Waker::noop()))
            .is_pending()
            && self.sender.is_ready()
    }
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
            let (mut link, reused) = match self.take() {
                Some(link) => (link, true),
                None => (self.connect().await?, false),
            };
            // Sent at once: the future only waits for the answer.
            let mut answer = pin!(link.sender.try_send_request(request));
            let answered = poll_fn(|cx| {
                if let Poll::Ready(answered) = answer.as_mut().poll(cx) {
                    return Poll::Ready(answered);
                }
                // The connection writes the request and reads the answer
                // (or ends, which answers with an error).
                let _ = link.drive(cx);
                answer.as_mut().poll(cx)
            })
            .await;
            match answered {
                Ok(response) => {
                    let (parts, body) = response.into_parts();
                    let body = Returning {
                        body,
                        done: false,
                        back: Some((Arc::clone(self), link)),
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
    fn take(&self) -> Option<Link> {
        loop {
            let Idle { mut link, .. } = self.idle.lock().pop_back()?;
            if link.ready_now() {
                return Some(link);
            }
        }
    }

    async fn connect(&self) -> Result<Link, SendError> {
        let stream = TcpStream::connect(&*self.addr).await?;
        // Small requests go out at once rather than wait for an ACK.
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        Ok(Link {
            sender,
            conn: Some(conn),
        })
    }

    /// Keeps `link` for a next request, once its connection is ready for
    /// one.
    fn put(self: Arc<Self>, mut link: Link) {
        if link.ready_now() {
            self.push(link);
        } else if !link.sender.is_closed() {
            // The connection has not finished its exchange (the request
            // body may still be going out): driven on the side until it has.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let ended = poll_fn(|cx| match link.drive(cx) {
                        Poll::Ready(()) => Poll::Ready(true),
                        Poll::Pending => link.sender.poll_ready(cx).map(|ready| ready.is_err()),
                    })
                    .await;
                    if !ended {
                        self.push(link);
                    }
                });
            }
        }
    }

    fn push(&self, link: Link) {
        let now = Instant::now();
        let mut idle = self.idle.lock();
        while idle
            .front()
            .is_some_and(|oldest| now.duration_since(oldest.since) >= IDLE_TIMEOUT)
        {
            idle.pop_front();
        }
        if idle.len() < MAX_IDLE {
            idle.push_back(Idle { link, since: now });
        }
    }
}

/// The upstream's response body, driving its connection while it is read,
/// and giving the connection back to the pool when dropped after its end. A
/// body dropped before its end closes the connection instead (HTTP/1.1
/// cannot skip the rest).
struct Returning {
    body: Incoming,
    done: bool,
    back: Option<(Arc<Pool>, Link)>,
}

impl http_body::Body for Returning {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let mut frame = Pin::new(&mut this.body).poll_frame(cx);
        if frame.is_pending() {
            if let Some((_, link)) = &mut this.back {
                // The body comes in through the connection: what this
                // drive reads is there for the second look.
                let _ = link.drive(cx);
                frame = Pin::new(&mut this.body).poll_frame(cx);
            }
        }
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
        if let Some((pool, link)) = self.back.take() {
            if self.done || http_body::Body::is_end_stream(&self.body) {
                pool.put(link);
            }
        }
    }
}
