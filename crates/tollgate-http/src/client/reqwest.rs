//! [`OutboundMiddleware`]: an [`Outbound`] as a `reqwest-middleware`
//! middleware.

use std::sync::Arc;

use http::{Extensions, HeaderMap, StatusCode};
use reqwest_middleware::{Error, Middleware, Next, Result};
use tollgate::{AsyncClock, MonotonicClock};

use super::{Answer, ClientError, Outbound, Outgoing};

/// Shapes and retries the requests of a `reqwest_middleware::ClientWithMiddleware`
/// (see [`Outbound`]). A request whose body cannot be copied (a stream) is
/// sent once, never retried. Connection errors are reqwest's
/// `is_connect()`. A request that is not sent fails with
/// [`Error::Middleware`] holding the [`ShapeError`](super::ShapeError).
pub struct OutboundMiddleware<C: AsyncClock = MonotonicClock> {
    outbound: Arc<Outbound<C>>,
}

impl<C: AsyncClock> OutboundMiddleware<C> {
    /// A middleware over `outbound`.
    pub fn new(outbound: Outbound<C>) -> Self {
        OutboundMiddleware {
            outbound: Arc::new(outbound),
        }
    }
}

impl Answer for reqwest::Response {
    fn status(&self) -> StatusCode {
        self.status()
    }
    fn headers(&self) -> &HeaderMap {
        self.headers()
    }
}

#[async_trait::async_trait]
impl<C: AsyncClock + Clone + 'static> Middleware for OutboundMiddleware<C> {
    async fn handle(
        &self,
        mut request: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<reqwest::Response> {
        let method = request.method().clone();
        self.outbound.prepare(&method, request.headers_mut());
        let headers = request.headers().clone();
        let url = request.url().clone();
        let template = request.try_clone();
        let out = Outgoing {
            method: &method,
            host: url.host_str().unwrap_or(""),
            path: url.path(),
            headers: &headers,
            replayable: template.is_some(),
        };
        let mut first = Some(request);
        let send = || {
            let request = first
                .take()
                .or_else(|| template.as_ref().and_then(reqwest::Request::try_clone))
                .expect("a request that cannot be copied is sent only once");
            let mut extensions = extensions.clone();
            let next = next.clone();
            async move { next.run(request, &mut extensions).await }
        };
        let connection_error = |e: &Error| matches!(e, Error::Reqwest(e) if e.is_connect());
        match self.outbound.send(&out, send, connection_error).await {
            Ok(response) => Ok(response),
            Err(ClientError::Upstream(e)) => Err(e),
            Err(ClientError::Shaped(e)) => Err(Error::middleware(e)),
        }
    }
}
