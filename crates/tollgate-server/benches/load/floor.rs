//! The least a reverse proxy built on hyper and Tokio does per request: the
//! floor under `tollgate serve`'s proxy in `proxy-ab.sh` (`FLOOR=N`).
//!
//! It is laid out as the proxy is with `--workers N`: N threads, each a
//! current-thread runtime accepting from one shared listening socket, each
//! with its own pool of upstream connections (hyper's HTTP/1 client, a task
//! per connection, a connection handed back when its answer's body ends).
//! Per request it appends `X-Forwarded-For` and `Forwarded` as nginx and
//! the proxy do, with values made once per connection, and forwards the
//! answer as it came. Everything else the proxy does is left out: the
//! limiter, normalising the target, hop-by-hop fields, timeouts, the
//! client's limits, metrics, logs. What it spends is hyper's and Tokio's
//! share of the proxy's cost, which no change inside tollgate can remove.

use std::cell::RefCell;
use std::error::Error;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{HeaderValue, FORWARDED};
use http::{Request, Response};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

type BoxError = Box<dyn Error + Send + Sync>;

/// One worker's idle upstream connections.
type Idle = Rc<RefCell<Vec<SendRequest<Incoming>>>>;

/// Serves on `port` until killed, forwarding to `127.0.0.1:upstream`.
pub fn run(port: u16, upstream: u16, workers: usize) {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("binds");
    listener.set_nonblocking(true).expect("non-blocking");
    let threads: Vec<_> = (0..workers.max(1))
        .map(|_| {
            let listener = listener.try_clone().expect("a second handle");
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime");
                let local = tokio::task::LocalSet::new();
                local.block_on(&runtime, worker(listener, upstream));
            })
        })
        .collect();
    println!("ready: floor on {port}, {} workers", threads.len());
    for thread in threads {
        let _ = thread.join();
    }
}

async fn worker(listener: std::net::TcpListener, upstream: u16) {
    let listener = tokio::net::TcpListener::from_std(listener).expect("a Tokio listener");
    let idle = Idle::default();
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let ip = peer.ip().to_string();
        let fields = Rc::new((
            HeaderValue::from_str(&ip).expect("an address is a field value"),
            HeaderValue::from_str(&format!("for={ip};proto=http")).expect("a field value"),
        ));
        let idle = Rc::clone(&idle);
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            let headers = request.headers_mut();
            headers.append("x-forwarded-for", fields.0.clone());
            headers.append(FORWARDED, fields.1.clone());
            forward(Rc::clone(&idle), upstream, request)
        });
        tokio::task::spawn_local(
            hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service),
        );
    }
}

/// The upstream's answer; an error (which closes the client's connection)
/// if it could not be had.
async fn forward(
    idle: Idle,
    upstream: u16,
    request: Request<Incoming>,
) -> Result<Response<Returning>, BoxError> {
    let (response, sender) = send(&idle, upstream, request).await?;
    Ok(response.map(|body| Returning {
        body,
        back: Some((idle, sender)),
    }))
}

async fn send(
    idle: &Idle,
    upstream: u16,
    request: Request<Incoming>,
) -> Result<(Response<Incoming>, SendRequest<Incoming>), BoxError> {
    let taken = idle.borrow_mut().pop();
    let mut sender = match taken {
        Some(sender) if sender.is_ready() => sender,
        _ => connect(upstream).await?,
    };
    let response = sender.send_request(request).await?;
    Ok((response, sender))
}

async fn connect(upstream: u16) -> Result<SendRequest<Incoming>, BoxError> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::task::spawn_local(conn);
    Ok(sender)
}

/// An answer's body that gives its connection back to the pool once it
/// was read to the end (the upstream's answers have a length, so its end
/// is known as soon as the last bytes came).
struct Returning {
    body: Incoming,
    back: Option<(Idle, SendRequest<Incoming>)>,
}

impl Body for Returning {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        let Some((idle, mut sender)) = self.back.take() else {
            return;
        };
        if !self.body.is_end_stream() {
            return;
        }
        if sender.is_ready() {
            idle.borrow_mut().push(sender);
        } else if !sender.is_closed() {
            // The connection's task has not seen the end yet.
            tokio::task::spawn_local(async move {
                if sender.ready().await.is_ok() {
                    idle.borrow_mut().push(sender);
                }
            });
        }
    }
}
