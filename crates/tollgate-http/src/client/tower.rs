//! [`OutboundLayer`]: an [`Outbound`] around any tower HTTP client, such as
//! hyper-util's `Client`.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tollgate::{AsyncClock, MonotonicClock};
use tower_layer::Layer;
use tower_service::Service;

use super::{ClientError, Outbound, Outgoing};

/// A tower [`Layer`] shaping and retrying the requests of the service it
/// wraps (see [`Outbound`]). Request bodies must be `Clone` (`Full<Bytes>`,
/// `Empty`, `String`) so a retry can send the same body again. Every error
/// of the inner service counts as a connection error for
/// [`Retry::connection_errors`](super::Retry::connection_errors):
/// hyper-util's client fails only on the transport.
pub struct OutboundLayer<C: AsyncClock = MonotonicClock> {
    outbound: Arc<Outbound<C>>,
}

impl<C: AsyncClock> Clone for OutboundLayer<C> {
    fn clone(&self) -> Self {
        OutboundLayer {
            outbound: self.outbound.clone(),
        }
    }
}

impl<C: AsyncClock> OutboundLayer<C> {
    /// A layer over `outbound`; every service it wraps shares its budgets.
    pub fn new(outbound: Outbound<C>) -> Self {
        OutboundLayer {
            outbound: Arc::new(outbound),
        }
    }

    /// The shared [`Outbound`].
    pub fn outbound(&self) -> &Arc<Outbound<C>> {
        &self.outbound
    }
}

impl<S, C: AsyncClock> Layer<S> for OutboundLayer<C> {
    type Service = OutboundService<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        OutboundService {
            inner,
            outbound: self.outbound.clone(),
        }
    }
}

/// The service of [`OutboundLayer`].
pub struct OutboundService<S, C: AsyncClock = MonotonicClock> {
    inner: S,
    outbound: Arc<Outbound<C>>,
}

impl<S: Clone, C: AsyncClock> Clone for OutboundService<S, C> {
    fn clone(&self) -> Self {
        OutboundService {
            inner: self.inner.clone(),
            outbound: self.outbound.clone(),
        }
    }
}

impl<S, B, RB, C> Service<Request<B>> for OutboundService<S, C>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: Clone + Send + Sync + 'static,
    RB: Send + 'static,
    C: AsyncClock + Clone + 'static,
{
    type Response = Response<RB>;
    type Error = ClientError<S::Error>;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(ClientError::Upstream)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The clone that was made ready goes with the request.
        let fresh = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, fresh);
        let outbound = self.outbound.clone();
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            outbound.prepare(&parts.method, &mut parts.headers);
            let out = Outgoing {
                method: &parts.method,
                host: parts.uri.host().unwrap_or(""),
                path: parts.uri.path(),
                headers: &parts.headers,
                replayable: true,
            };
            let (parts, body) = (&parts, &body);
            // `inner` moves in: the future then needs `S: Send`, not `Sync`.
            let send = move || {
                let request = copy(parts, body);
                let mut service = inner.clone();
                async move {
                    poll_fn(|cx| service.poll_ready(cx)).await?;
                    service.call(request).await
                }
            };
            outbound.send(&out, send, |_| true).await
        })
    }
}

/// One attempt's copy of the request.
fn copy<B: Clone>(parts: &http::request::Parts, body: &B) -> Request<B> {
    let mut request = Request::new(body.clone());
    *request.method_mut() = parts.method.clone();
    *request.uri_mut() = parts.uri.clone();
    *request.version_mut() = parts.version;
    *request.headers_mut() = parts.headers.clone();
    *request.extensions_mut() = parts.extensions.clone();
    request
}
