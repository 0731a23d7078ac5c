//! Reverse proxy mode: the HTTP layer (`tollgate-http`, with the rules of
//! the file's `http` section) in front of an upstream HTTP service.
//!
//! Bodies stream both ways (nothing is buffered: a 1 GiB upload never sits
//! in memory); connections to the upstream are kept alive and reused
//! ([`pool`]); `X-Forwarded-For` and `Forwarded` get the client appended;
//! hop-by-hop headers are removed in both directions. An unreachable
//! upstream is a 502, one that does not answer within the timeout a 504.
//!
//! The request's target and `Host` are put in one canonical form before
//! the rules see them, and forwarded in that form ([`target`]): the path
//! and host that are decided are the ones the upstream gets.
//!
//! The request path is a tower service over the listener's hyper
//! connection, with no router: the layer built from the rules in force
//! (rebuilt once per configuration change, swapped atomically) around the
//! forwarding service.

mod headers;
mod pool;
mod target;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use axum::body::Body;
use http::header::{self, HeaderValue};
use http::uri::Authority;
use http::{Request, Response, StatusCode, Uri, Version};
use tollgate::Backend;
use tollgate_http::{BuildError, LimitBody, RateLimit, RateLimitService, ResponseFuture};
use tower::{Layer, Service};

use self::headers::remove_hop_by_hop;
pub(crate) use self::headers::Client;
use self::pool::Pool;
use crate::config::Config;
use crate::engine::Engine;
use crate::listener::{Fault, HttpService};
use crate::metrics;

/// Why the proxy cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The upstream is not an `http://host:port` URL.
    #[error("invalid upstream `{0}`: expected http://HOST:PORT")]
    Upstream(String),
    /// The upstream URL has a path, which the proxy would not use.
    #[error("invalid upstream `{0}`: a path is not supported (each request keeps its own path); give http://HOST:PORT")]
    UpstreamPath(String),
    /// The file's HTTP rules do not build.
    #[error("the HTTP rules: {0}")]
    Rules(#[from] BuildError),
}

/// A response future of the proxy's services.
type Answer = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

/// The service behind the rules: forwards a request to the upstream.
#[derive(Clone)]
struct Forward(Arc<Upstream>);

struct Upstream {
    /// The `Host` of requests that came without one (HTTP/1.0).
    host: HeaderValue,
    pool: Arc<Pool>,
    timeout: Duration,
}

/// The layer of one configuration around the forwarding service.
type Limited<B> = RateLimitService<Forward, B>;

/// The proxy: the current rules (rebuilt when the configuration changes)
/// over the forwarding service.
pub struct Proxy<B: Backend> {
    engine: Arc<Engine<B>>,
    forward: Forward,
    /// The configuration the layer was built from, and the layer: none
    /// when the configuration has no HTTP rule, since a layer with nothing
    /// to decide would only add its own cost to every request.
    built: ArcSwapOption<(Arc<Config>, Option<Limited<B>>)>,
}

impl<B: Backend + Clone + 'static> Proxy<B> {
    /// A proxy to `upstream` (`http://host:port`) limited by the HTTP rules
    /// of `engine`'s configuration, in `engine`'s store.
    pub fn new(
        engine: Arc<Engine<B>>,
        upstream: &str,
        timeout: Duration,
    ) -> Result<Arc<Self>, ProxyError> {
        let invalid = || ProxyError::Upstream(upstream.to_string());
        let uri: Uri = upstream.parse().map_err(|_| invalid())?;
        let (Some("http"), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(invalid());
        };
        // Requests are forwarded with their own path: a path here would be
        // dropped without a word.
        if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
            return Err(ProxyError::UpstreamPath(upstream.to_string()));
        }
        let proxy = Proxy {
            engine,
            forward: Forward(Arc::new(Upstream {
                host: HeaderValue::from_str(authority.as_str()).map_err(|_| invalid())?,
                pool: Pool::new(socket_addr(authority)),
                timeout,
            })),
            built: ArcSwapOption::empty(),
        };
        // Built now so that rules that do not build fail the start.
        let _checked = proxy.limited()?;
        Ok(Arc::new(proxy))
    }

    /// The layer for the configuration in force, built once per change;
    /// none without HTTP rules.
    fn limited(&self) -> Result<Option<Limited<B>>, ProxyError> {
        let config = self.engine.config();
        if let Some(built) = self.built.load().as_ref() {
            if Arc::ptr_eq(&built.0, &config) {
                return Ok(built.1.clone());
            }
        }
        let rules = self.engine.http_rules(&config);
        let limited = if rules.is_empty() {
            None
        } else {
            // The process's recorder is installed before any listener
            // starts (`metrics::handle` in `start`), so its handles can be
            // kept.
            crate::metrics::handle();
            let limit = RateLimit::builder(self.engine.backend().clone())
                .register_metrics_once()
                .client_ip(config.http_client_ip().clone())
                .top_in(
                    Arc::clone(self.engine.top()),
                    Arc::clone(self.engine.top_clock()),
                );
            let limit = rules
                .into_iter()
                .fold(limit, |limit, rule| limit.rule(rule));
            Some(limit.build()?.layer(self.forward.clone()))
        };
        self.built.store(Some(Arc::new((config, limited.clone()))));
        Ok(limited)
    }

    /// The proxy as a service, for a listener.
    pub fn service(self: Arc<Self>) -> impl HttpService {
        tower::service_fn(move |request: Request<Body>| self.answer(request))
    }

    fn answer(&self, request: Request<Body>) -> Reply<B> {
        let (mut parts, body) = request.into_parts();
        if let Err(e) = target::canonicalize(&mut parts) {
            metrics::refused("bad_target");
            let answer = status(
                StatusCode::BAD_REQUEST,
                "the request target has no single meaning\n",
            );
            tracing::debug!(error = %e, "request target refused");
            return Reply::Now(Some(answer));
        }
        let request = Request::from_parts(parts, body);
        match self.limited() {
            // `Forward` is always ready, so is the layer over it.
            Ok(Some(mut limited)) => Reply::Limited(limited.call(request)),
            Ok(None) => Reply::Forwarded(self.forward.clone().call(request)),
            Err(e) => {
                // A reloaded file whose rules do not build: refuse rather
                // than forward unlimited.
                tracing::error!(error = %e, "the HTTP rules do not build");
                Reply::Now(Some(status(StatusCode::INTERNAL_SERVER_ERROR, "")))
            }
        }
    }
}

/// The proxy's answer to one request: the layer's future, the forwarding
/// service's with no rule to apply, or an answer known at once. A type
/// rather than a boxed future: the box and the move of the layer's future
/// into it cost about 500 instructions a request (callgrind;
/// docs/PERFORMANCE.md, "Server"). `Now` is the rare answer (a bad target,
/// rules that do not build), hence the size difference.
#[allow(clippy::large_enum_variant)]
enum Reply<B: Backend + 'static> {
    Now(Option<Response<Body>>),
    Limited(ResponseFuture<Forward, B, Body, Body>),
    Forwarded(Answer),
}

impl<B: Backend + Clone + 'static> Future for Reply<B> {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // The layer's future is `Unpin`: every future it holds is boxed.
        match self.get_mut() {
            Reply::Now(answer) => Poll::Ready(Ok(answer.take().expect("polled after it answered"))),
            Reply::Limited(limited) => Pin::new(limited)
                .poll(cx)
                .map(|Ok(response)| Ok(response.map(LimitBody::into_inner))),
            Reply::Forwarded(forwarded) => forwarded.as_mut().poll(cx),
        }
    }
}

/// `host:port` to connect to, port 80 by default.
fn socket_addr(authority: &Authority) -> String {
    format!(
        "{}:{}",
        authority.host(),
        authority.port_u16().unwrap_or(80)
    )
}

impl Service<Request<Body>> for Forward {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Answer;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Answer {
        Box::pin(forward(Arc::clone(&self.0), request))
    }
}

fn status(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    response
}

async fn forward(
    upstream: Arc<Upstream>,
    request: Request<Body>,
) -> Result<Response<Body>, Infallible> {
    // The target is origin-form already ([`target::canonicalize`]).
    let (mut parts, body) = request.into_parts();
    // Kept alive whatever the client speaks.
    parts.version = Version::HTTP_11;
    let headers = &mut parts.headers;
    remove_hop_by_hop(headers);
    if let Some(client) = parts.extensions.get::<Client>() {
        client.append_to(headers);
    }
    if !headers.contains_key(header::HOST) {
        headers.insert(header::HOST, upstream.host.clone());
    }
    let request = Request::from_parts(parts, body);
    Ok(
        match tokio::time::timeout(upstream.timeout, upstream.pool.send(request)).await {
            Err(_) => status(
                StatusCode::GATEWAY_TIMEOUT,
                "the upstream did not answer in time\n",
            ),
            // The client's body failed (the listener answers for it).
            Ok(Err(e)) if Fault::behind(&*e).is_some() => status(StatusCode::BAD_REQUEST, ""),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "upstream request failed");
                status(StatusCode::BAD_GATEWAY, "the upstream is unreachable\n")
            }
            Ok(Ok(mut response)) => {
                remove_hop_by_hop(response.headers_mut());
                response
            }
        },
    )
}
