//! [`RequestView`]: the few facts about a request that rules look at.
//!
//! Keys, costs and matchers are pure functions of this view, so the same code
//! derives keys from a live request (the layer builds the view from
//! `http::Request` parts) and from a line of an access log (build the view
//! from the logged fields), and a rule tested offline is the rule that runs.
//!
//! ```
//! use std::net::IpAddr;
//! use http::HeaderMap;
//! use tollgate_http::{Labels, RequestView};
//!
//! let headers = HeaderMap::new();
//! let labels = Labels::new().with("tenant", "acme");
//! let view = RequestView {
//!     method: "POST",
//!     path: "/v1/chat",
//!     query: None,
//!     host: Some("api.example.com"),
//!     headers: &headers,
//!     peer: Some("203.0.113.9".parse::<IpAddr>().unwrap()),
//!     route: Some("/v1/chat"),
//!     labels: Some(&labels),
//! };
//! assert_eq!(view.label("tenant"), Some("acme"));
//! ```

use std::net::{IpAddr, SocketAddr};

use http::request::Parts;
use http::{Extensions, HeaderMap, Method, Request, Uri};

/// A request as the rules see it, borrowed from wherever it came from.
#[derive(Clone, Copy, Debug)]
pub struct RequestView<'a> {
    /// The method, upper case (`GET`).
    pub method: &'a str,
    /// The path, without the query.
    pub path: &'a str,
    /// The query string, without the `?`, if any.
    pub query: Option<&'a str>,
    /// The host the client asked for (URI authority or `Host` header), if any.
    pub host: Option<&'a str>,
    /// Every header, with repeated lines in arrival order.
    pub headers: &'a HeaderMap,
    /// The address of the peer that opened the connection.
    pub peer: Option<IpAddr>,
    /// The route template that matched (axum's `MatchedPath`), if known.
    pub route: Option<&'a str>,
    /// Values the service's own layers attached (user, tenant): see [`Labels`].
    pub labels: Option<&'a Labels>,
}

impl<'a> RequestView<'a> {
    /// The view of a live request: the peer comes from axum's
    /// `ConnectInfo<SocketAddr>` or from a [`PeerAddr`] extension (for plain
    /// hyper services), the route from axum's `MatchedPath`, the labels from
    /// a [`Labels`] extension.
    pub fn of(parts: &'a Parts) -> Self {
        Self::of_pieces(
            &parts.method,
            &parts.uri,
            &parts.headers,
            &parts.extensions,
            Reads::ALL,
        )
    }

    /// [`RequestView::of`] a whole request, which the layer then passes on
    /// without taking it apart and putting it back together, with only the
    /// optional parts its rules `reads` looked up (the others `None`).
    pub(crate) fn of_request<B>(request: &'a Request<B>, reads: Reads) -> Self {
        Self::of_pieces(
            request.method(),
            request.uri(),
            request.headers(),
            request.extensions(),
            reads,
        )
    }

    fn of_pieces(
        method: &'a Method,
        uri: &'a Uri,
        headers: &'a HeaderMap,
        ext: &'a Extensions,
        reads: Reads,
    ) -> Self {
        let peer = ext
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip())
            .or_else(|| ext.get::<PeerAddr>().map(|p| p.0.ip()));
        let host = reads.host.then(|| host(uri, headers)).flatten();
        let route = reads
            .route
            .then(|| ext.get::<axum::extract::MatchedPath>())
            .flatten();
        RequestView {
            method: method.as_str(),
            path: uri.path(),
            query: uri.query(),
            host,
            headers,
            peer,
            route: route.map(axum::extract::MatchedPath::as_str),
            labels: reads.labels.then(|| ext.get::<Labels>()).flatten(),
        }
    }

    /// The value of label `name`, if the request carries it.
    pub fn label(&self, name: &str) -> Option<&'a str> {
        self.labels.and_then(|l| l.get(name))
    }
}

/// Which of a view's parts that cost a lookup to find a set of rules reads
/// (the layer looks up only those). Method, path, query, headers and peer
/// are always there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reads {
    pub(crate) host: bool,
    pub(crate) route: bool,
    pub(crate) labels: bool,
}

impl Reads {
    /// Every part.
    pub(crate) const ALL: Reads = Reads {
        host: true,
        route: true,
        labels: true,
    };

    /// The parts either reads.
    pub(crate) fn and(self, other: Reads) -> Reads {
        Reads {
            host: self.host || other.host,
            route: self.route || other.route,
            labels: self.labels || other.labels,
        }
    }
}

/// The host the client asked for: the URI's authority, else `Host`
/// without its port.
fn host<'a>(uri: &'a Uri, headers: &'a HeaderMap) -> Option<&'a str> {
    uri.host().or_else(|| {
        headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(strip_port)
    })
}

/// `host:port` to `host`, keeping a bracketed IPv6 literal whole.
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

/// The peer's address, for services served by plain hyper: insert it into
/// each request's extensions (axum's `into_make_service_with_connect_info`
/// does the same with `ConnectInfo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// Named values a service's own layers attach to a request (the user or the
/// tenant its authentication found), for keys such as
/// [`Key::Label`](crate::Key::Label). In an access log they are ordinary
/// fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels(Vec<(String, String)>);

impl Labels {
    /// No labels.
    pub fn new() -> Self {
        Labels::default()
    }

    /// These labels with `name` set to `value` (replacing an earlier value).
    pub fn with(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.set(name, value);
        self
    }

    /// Sets `name` to `value`, replacing an earlier value.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let (name, value) = (name.into(), value.into());
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name, value)),
        }
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_without_port() {
        assert_eq!(strip_port("example.com:8080"), "example.com");
        assert_eq!(strip_port("example.com"), "example.com");
        assert_eq!(strip_port("[2001:db8::1]:443"), "[2001:db8::1]");
    }

    #[test]
    fn view_of_parts_reads_extensions() {
        let mut req = http::Request::get("http://h.example:81/a?b=1")
            .body(())
            .unwrap();
        req.extensions_mut()
            .insert(PeerAddr("192.0.2.1:5000".parse().unwrap()));
        req.extensions_mut()
            .insert(Labels::new().with("user", "u1"));
        let (parts, ()) = req.into_parts();
        let view = RequestView::of(&parts);
        assert_eq!(view.path, "/a");
        assert_eq!(view.query, Some("b=1"));
        assert_eq!(view.host, Some("h.example"));
        assert_eq!(view.peer, Some("192.0.2.1".parse().unwrap()));
        assert_eq!(view.label("user"), Some("u1"));
        assert_eq!(view.label("tenant"), None);
    }

    #[test]
    fn labels_replace() {
        let mut l = Labels::new().with("a", "1");
        l.set("a", "2");
        assert_eq!(l.get("a"), Some("2"));
    }
}
