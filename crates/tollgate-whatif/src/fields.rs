//! [`Fields`]: what one log line says about its request, borrowed from the
//! line, and [`Wanted`]: the headers and labels the keys read, so a parser
//! extracts only those.

use std::net::IpAddr;

use http::HeaderName;
use tollgate_http::{ClientIp, Cost, ForwardedHeader, Key};

/// The parts of one logged request the keys, costs and matchers look at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fields<'a> {
    /// Nanoseconds since the Unix epoch (or the trace's own clock).
    pub t_ns: Option<u64>,
    /// The address of the peer that opened the connection.
    pub peer: Option<IpAddr>,
    /// The method, as logged.
    pub method: &'a str,
    /// The path, without the query.
    pub path: &'a str,
    /// The query, without `?`.
    pub query: Option<&'a str>,
    /// The host the client asked for.
    pub host: Option<&'a str>,
    /// Wanted headers found: (index into [`Wanted::headers`], value).
    pub headers: Vec<(usize, &'a [u8])>,
    /// Wanted labels found: (index into [`Wanted::labels`], value).
    pub labels: Vec<(usize, &'a str)>,
    /// A CSV trace's key, used as is.
    pub key: Option<&'a [u8]>,
    /// A CSV trace's cost.
    pub cost: Option<u64>,
}

/// The headers and labels (any other logged field: user, API key) the keys
/// and costs read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    /// Header names, lower case.
    pub headers: Vec<HeaderName>,
    /// Label names.
    pub labels: Vec<String>,
}

impl Wanted {
    /// What `keys` and `costs` read, plus the forwarding header when proxies
    /// are trusted.
    pub fn of<'k>(
        keys: impl IntoIterator<Item = &'k Key>,
        costs: impl IntoIterator<Item = &'k Cost>,
        client_ip: &ClientIp,
    ) -> Self {
        let mut wanted = Wanted::default();
        for key in keys {
            wanted.add_key(key);
        }
        for cost in costs {
            if let Cost::Header(name) = cost {
                wanted.add_header(name.clone());
            }
        }
        if !client_ip.trusted_proxies.is_empty() {
            wanted.add_header(match client_ip.header {
                ForwardedHeader::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
                ForwardedHeader::Forwarded => http::header::FORWARDED,
            });
        }
        wanted
    }

    fn add_key(&mut self, key: &Key) {
        match key {
            Key::Header(h) => self.add_header(h.name.clone()),
            Key::Label(name) if !self.labels.contains(name) => self.labels.push(name.clone()),
            Key::All(parts) | Key::FirstOf(parts) => parts.iter().for_each(|p| self.add_key(p)),
            _ => {}
        }
    }

    fn add_header(&mut self, name: HeaderName) {
        if !self.headers.contains(&name) {
            self.headers.push(name);
        }
    }

    /// The index of header `name` (any case, `_` read as `-`).
    pub fn header_index(&self, name: &str) -> Option<usize> {
        self.headers.iter().position(|h| {
            let h = h.as_str().as_bytes();
            h.len() == name.len()
                && h.iter().zip(name.bytes()).all(|(a, b)| {
                    let b = if b == b'_' {
                        b'-'
                    } else {
                        b.to_ascii_lowercase()
                    };
                    *a == b
                })
        })
    }

    /// The index of label `name`.
    pub fn label_index(&self, name: &str) -> Option<usize> {
        self.labels.iter().position(|l| l == name)
    }
}

/// `/p?q` split into path and query; an absolute URI (`http://h/p`) loses
/// its scheme and authority first.
pub fn split_uri(uri: &str) -> (&str, Option<&str>) {
    let uri = match uri.find("://") {
        Some(i) if !uri.starts_with('/') => {
            uri[i + 3..].find('/').map_or("/", |j| &uri[i + 3 + j..])
        }
        _ => uri,
    };
    match uri.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (uri, None),
    }
}

/// An address as logged, with or without a port: the HTTP layer's parser
/// of forwarding hops.
pub fn parse_addr(text: &str) -> Option<IpAddr> {
    tollgate_http::parse_hop(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_and_addresses() {
        assert_eq!(split_uri("/a/b?x=1"), ("/a/b", Some("x=1")));
        assert_eq!(split_uri("/a"), ("/a", None));
        assert_eq!(split_uri("https://h.example/p?q"), ("/p", Some("q")));
        assert_eq!(split_uri("http://h.example"), ("/", None));
        assert_eq!(parse_addr("[2001:db8::1]:443"), "2001:db8::1".parse().ok());
        assert_eq!(parse_addr("192.0.2.1:80"), "192.0.2.1".parse().ok());
        assert_eq!(parse_addr("2001:db8::1"), "2001:db8::1".parse().ok());
        assert_eq!(parse_addr("-"), None);
    }

    #[test]
    fn wanted_walks_composites_and_proxies() {
        let key = Key::first_of([
            Key::header("x-api-key"),
            Key::all([Key::label("user"), Key::ip()]),
        ]);
        let ip = ClientIp::behind(
            ["10.0.0.0/8".parse().unwrap()],
            ForwardedHeader::XForwardedFor,
        );
        let w = Wanted::of([&key], [], &ip);
        assert_eq!(w.labels, ["user"]);
        assert_eq!(w.header_index("X_API_KEY"), Some(0));
        assert_eq!(w.header_index("x-forwarded-for"), Some(1));
        assert_eq!(w.header_index("x-api-keys"), None);
    }
}
