//! One kept-alive HTTP/1.1 connection (hyper's client `conn` API), and what
//! became of one request on it.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::TcpStream;

use crate::fields;

/// The largest response body read; a larger one is an error (a load test
/// must not buffer whatever a server sends).
const MAX_BODY: usize = 1 << 20;

/// Why a request got no HTTP answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// The connection could not be opened.
    Connect,
    /// No complete answer within the timeout.
    Timeout,
    /// The server closed or reset the connection before answering.
    Closed,
    /// The answer was not HTTP (or its body was broken or too large).
    Protocol,
}

impl Failure {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Failure::Connect => "connect",
            Failure::Timeout => "timeout",
            Failure::Closed => "closed",
            Failure::Protocol => "protocol",
        }
    }
}

/// An HTTP answer, with what a client can use of its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// `Retry-After` as delta-seconds, when valid.
    pub retry_after: Option<u64>,
    /// `RateLimit` present and valid.
    pub ratelimit: bool,
    /// `RateLimit-Policy` present and valid.
    pub policy: bool,
}

/// hyper's connection future: reads and writes the socket.
type Driver = Pin<Box<Connection<TokioIo<TcpStream>, Empty<Bytes>>>>;

/// A connection, driven by the task that sends on it (no second task, so
/// no wake-up crosses threads per request: the generator must not be the
/// bottleneck). Dropping it closes the socket, so a connection abandoned
/// after a timeout does not linger.
pub struct Conn {
    sender: SendRequest<Empty<Bytes>>,
    driver: Driver,
    /// The driver finished: the server closed, or the connection failed.
    ended: bool,
}

/// Polls `work` and the connection's driver together until `work` is done;
/// a driver that ends first (the server closed) fails it.
async fn drive<F: Future>(
    driver: &mut Driver,
    ended: &mut bool,
    work: F,
) -> Result<F::Output, Failure> {
    let mut work = std::pin::pin!(work);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = work.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        if *ended {
            return Poll::Ready(Err(Failure::Closed));
        }
        match driver.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(result) => {
                *ended = true;
                match work.as_mut().poll(cx) {
                    Poll::Ready(out) => Poll::Ready(Ok(out)),
                    Poll::Pending if result.is_err() => Poll::Ready(Err(Failure::Protocol)),
                    Poll::Pending => Poll::Ready(Err(Failure::Closed)),
                }
            }
        }
    })
    .await
}

impl Conn {
    /// Opens a connection to `addr` within `timeout`.
    pub async fn open(addr: SocketAddr, timeout: Duration) -> Result<Conn, Failure> {
        let open = async {
            let stream = TcpStream::connect(addr)
                .await
                .map_err(|_| Failure::Connect)?;
            let _ = stream.set_nodelay(true);
            let (sender, driver) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|_| Failure::Connect)?;
            Ok(Conn {
                sender,
                driver: Box::pin(driver),
                ended: false,
            })
        };
        tokio::time::timeout(timeout, open)
            .await
            .unwrap_or(Err(Failure::Timeout))
    }

    /// Whether the server closed the connection (it cannot be reused):
    /// polls the driver once, so a close that arrived while the connection
    /// sat idle is seen before a request is sent on it.
    pub async fn is_closed(&mut self) -> bool {
        if !self.ended {
            let driver = &mut self.driver;
            if std::future::poll_fn(|cx| Poll::Ready(driver.as_mut().poll(cx)))
                .await
                .is_ready()
            {
                self.ended = true;
            }
        }
        self.ended || self.sender.is_closed()
    }

    /// Sends `request` and reads the whole answer within `timeout`. After
    /// an error the connection must not be reused.
    pub async fn send(
        &mut self,
        request: Request<Empty<Bytes>>,
        timeout: Duration,
    ) -> Result<Answer, Failure> {
        let Conn {
            sender,
            driver,
            ended,
        } = self;
        let exchange = async {
            drive(driver, ended, sender.ready())
                .await?
                .map_err(classify)?;
            let response = drive(driver, ended, sender.send_request(request))
                .await?
                .map_err(classify)?;
            let (parts, body) = response.into_parts();
            drive(driver, ended, Limited::new(body, MAX_BODY).collect())
                .await?
                .map_err(|_| Failure::Protocol)?;
            Ok(Answer {
                status: parts.status.as_u16(),
                retry_after: fields::retry_after_secs(&parts.headers),
                ratelimit: fields::ratelimit_valid(&parts.headers),
                policy: fields::policy_valid(&parts.headers),
            })
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or(Err(Failure::Timeout))
    }
}

fn classify(e: hyper::Error) -> Failure {
    if e.is_parse() || e.is_parse_status() || e.is_parse_too_large() {
        Failure::Protocol
    } else if e.is_timeout() {
        Failure::Timeout
    } else {
        Failure::Closed
    }
}
