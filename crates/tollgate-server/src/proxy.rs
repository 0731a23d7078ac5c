//! Reverse proxy mode: the HTTP layer (`tollgate-http`, with the rules of
//! the file's `http` section) in front of an upstream HTTP service.
//!
//! Bodies stream both ways (nothing is buffered: a 1 GiB upload never sits
//! in memory); connections to the upstream are kept alive and reused;
//! `X-Forwarded-For` and `Forwarded` get the client appended; hop-by-hop
//! headers are removed in both directions. An unreachable upstream is a
//! 502, one that does not answer within the timeout a 504.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::response::{IntoResponse, Response};
use axum::Router;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tollgate::Backend;
use tollgate_http::{BuildError, RateLimit};
use tower::ServiceExt;

use crate::config::Config;
use crate::engine::Engine;

/// Hop-by-hop fields (RFC 9110 §7.6.1), never forwarded.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Why the proxy cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The upstream is not an `http://host:port` URL.
    #[error("invalid upstream `{0}`: expected http://HOST:PORT")]
    Upstream(String),
    /// The file's HTTP rules do not build.
    #[error("the HTTP rules: {0}")]
    Rules(#[from] BuildError),
}

struct Upstream {
    scheme_authority: String,
    client: Client<HttpConnector, Body>,
    timeout: Duration,
}

/// The proxy: the current rules (rebuilt when the configuration changes)
/// over the forwarding service.
pub struct Proxy<B> {
    engine: Arc<Engine<B>>,
    upstream: Arc<Upstream>,
    /// The configuration the router was built from, and the router.
    built: ArcSwapOption<(Arc<Config>, Router)>,
}

impl<B: Backend + Clone + 'static> Proxy<B> {
    /// A proxy to `upstream` (`http://host:port`) limited by the HTTP rules
    /// of `engine`'s configuration, in `engine`'s store.
    pub fn new(
        engine: Arc<Engine<B>>,
        upstream: &str,
        timeout: Duration,
    ) -> Result<Arc<Self>, ProxyError> {
        let uri: Uri = upstream
            .parse()
            .map_err(|_| ProxyError::Upstream(upstream.to_string()))?;
        let (Some("http"), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(ProxyError::Upstream(upstream.to_string()));
        };
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        let proxy = Proxy {
            engine,
            upstream: Arc::new(Upstream {
                scheme_authority: format!("http://{authority}"),
                client,
                timeout,
            }),
            built: ArcSwapOption::empty(),
        };
        // Built now so that rules that do not build fail the start.
        let _checked = proxy.router()?;
        Ok(Arc::new(proxy))
    }

    /// The router for the configuration in force, built once per change.
    fn router(&self) -> Result<Router, ProxyError> {
        let config = self.engine.config();
        if let Some(built) = self.built.load().as_ref() {
            if Arc::ptr_eq(&built.0, &config) {
                return Ok(built.1.clone());
            }
        }
        let mut limit = RateLimit::builder(self.engine.backend().clone());
        for rule in config.http_rules() {
            limit = limit.rule(rule.clone());
        }
        let router = Router::new()
            .fallback(forward)
            .with_state(Arc::clone(&self.upstream))
            .layer(limit.build()?);
        self.built.store(Some(Arc::new((config, router.clone()))));
        Ok(router)
    }

    /// The proxy as a router, for a listener.
    pub fn service(self: Arc<Self>) -> Router {
        Router::new().fallback(move |request: Request| {
            let proxy = Arc::clone(&self);
            async move {
                match proxy.router() {
                    Ok(router) => router.oneshot(request).await.into_response(),
                    Err(e) => {
                        // A reloaded file whose rules do not build: refuse
                        // rather than forward unlimited.
                        tracing::error!(error = %e, "the HTTP rules do not build");
                        StatusCode::INTERNAL_SERVER_ERROR.into_response()
                    }
                }
            }
        })
    }
}

fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in HOP_BY_HOP.iter().chain(&listed) {
        headers.remove(name);
    }
    // `Upgrade` is hop-by-hop too; this proxy does not tunnel upgrades.
    headers.remove(header::UPGRADE);
}

/// Appends the client to `X-Forwarded-For` and `Forwarded` (RFC 7239).
fn append_forwarded(headers: &mut HeaderMap, peer: SocketAddr) {
    let ip = peer.ip();
    let xff = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(prior) => format!("{prior}, {ip}"),
        None => ip.to_string(),
    };
    let node = match ip {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => format!("\"[{v6}]\""),
    };
    let mut element = format!("for={node};proto=http");
    if let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) {
        if host.bytes().all(|b| b.is_ascii_graphic()) && !host.contains('"') {
            element.push_str(&format!(";host=\"{host}\""));
        }
    }
    let forwarded = match headers.get(header::FORWARDED).and_then(|v| v.to_str().ok()) {
        Some(prior) => format!("{prior}, {element}"),
        None => element,
    };
    for (name, value) in [("x-forwarded-for", xff), ("forwarded", forwarded)] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
}

async fn forward(State(upstream): State<Arc<Upstream>>, mut request: Request) -> Response {
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let Ok(uri) = format!("{}{path}", upstream.scheme_authority).parse::<Uri>() else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    *request.uri_mut() = uri;
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    let headers = request.headers_mut();
    remove_hop_by_hop(headers);
    if let Some(peer) = peer {
        append_forwarded(headers, peer);
    }
    match tokio::time::timeout(upstream.timeout, upstream.client.request(request)).await {
        Err(_) => (
            StatusCode::GATEWAY_TIMEOUT,
            "the upstream did not answer in time\n",
        )
            .into_response(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "upstream request failed");
            (StatusCode::BAD_GATEWAY, "the upstream is unreachable\n").into_response()
        }
        Ok(Ok(response)) => {
            let (mut parts, body) = response.into_parts();
            remove_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, Body::new(body))
        }
    }
}
