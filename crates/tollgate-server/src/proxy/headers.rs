//! The header rewriting of a forwarded request and its response.

use std::fmt::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, Entry, HeaderMap, HeaderName, HeaderValue};
use parking_lot::Mutex;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Removes the hop-by-hop fields, with those `Connection` lists.
pub(crate) fn remove_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none: one look at the few names there are costs
    // less than a lookup for each of the nine.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    let mut hop_by_hop: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    hop_by_hop.extend(headers.keys().filter(|name| is_hop_by_hop(name)).cloned());
    for name in &hop_by_hop {
        headers.remove(name);
    }
}

/// Whether `name` is hop-by-hop whatever `Connection` says (RFC 9110
/// §7.6.1, and `Upgrade`: this proxy does not tunnel upgrades). By its
/// text, compared by length first: nine `HeaderName` comparisons for each
/// field of each message cost about 200 instructions a request.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// The client of one connection, as the listener hands it to the proxy
/// with each request (an extension): its address, and the
/// `X-Forwarded-For` and `Forwarded` values made for it, kept for the
/// connection's next requests. A keep-alive client sends every request from
/// one address and nearly always with one `Host`, so the values are written
/// once per connection rather than once per request (about 1,700
/// instructions a request fewer; docs/PERFORMANCE.md, session 16).
#[derive(Clone)]
pub(crate) struct Client(Arc<Connection>);

struct Connection {
    peer: SocketAddr,
    /// The values for the last `Host` seen.
    made: Mutex<Option<Made>>,
}

/// The fields a request from the client with `host` gets when it has none
/// of its own.
struct Made {
    /// The request's `Host` as it came (`None`: no `Host`), copied: the
    /// request's own value shares hyper's read buffer, which a value kept
    /// for the connection's lifetime would keep from being reused.
    host: Option<Box<[u8]>>,
    x_forwarded_for: HeaderValue,
    forwarded: HeaderValue,
}

impl Client {
    /// The client at `peer`, nothing made yet.
    pub(crate) fn new(peer: SocketAddr) -> Self {
        Client(Arc::new(Connection {
            peer,
            made: Mutex::new(None),
        }))
    }

    /// Appends the client to `X-Forwarded-For` and `Forwarded` (RFC 7239),
    /// in the form its key uses: an IPv4 client of a dual-stack socket is
    /// `127.0.0.1`, not `::ffff:127.0.0.1`. `Forwarded` carries the `Host`
    /// too when it is a token a quoted string can hold.
    pub(crate) fn append_to(&self, headers: &mut HeaderMap) {
        let host = headers.get(header::HOST);
        let (x_forwarded_for, forwarded) = {
            let mut made = self.0.made.lock();
            let sent = host.map(HeaderValue::as_bytes);
            if made
                .as_ref()
                .is_none_or(|kept| kept.host.as_deref() != sent)
            {
                *made = Made::new(self.0.peer, host);
            }
            let Some(current) = made.as_ref() else {
                return;
            };
            (current.x_forwarded_for.clone(), current.forwarded.clone())
        };
        append(headers, X_FORWARDED_FOR, x_forwarded_for);
        append(headers, header::FORWARDED, forwarded);
    }
}

impl Made {
    /// The values for the client at `peer` sending `host`; `None` if they
    /// make no field value (which an address and a checked host cannot).
    fn new(peer: SocketAddr, host: Option<&HeaderValue>) -> Option<Self> {
        let ip = peer.ip().to_canonical();
        let mut x_forwarded_for = String::new();
        push_ip(&mut x_forwarded_for, ip);
        let mut forwarded = String::from("for=");
        match ip {
            IpAddr::V4(_) => forwarded.push_str(&x_forwarded_for),
            IpAddr::V6(_) => {
                forwarded.push_str("\"[");
                forwarded.push_str(&x_forwarded_for);
                forwarded.push_str("]\"");
            }
        }
        forwarded.push_str(";proto=http");
        let quotable = host
            .filter(|v| {
                v.as_bytes()
                    .iter()
                    .all(|b| b.is_ascii_graphic() && *b != b'"')
            })
            .and_then(|v| v.to_str().ok());
        if let Some(quotable) = quotable {
            forwarded.push_str(";host=\"");
            forwarded.push_str(quotable);
            forwarded.push('"');
        }
        Some(Made {
            host: host.map(|v| v.as_bytes().into()),
            x_forwarded_for: HeaderValue::from_maybe_shared(Bytes::from(x_forwarded_for)).ok()?,
            forwarded: HeaderValue::from_maybe_shared(Bytes::from(forwarded)).ok()?,
        })
    }
}

/// Adds `own` to the `name` fields: alone if there are none, else one list
/// of every prior field's value (a list in several fields is one
/// comma-separated list) and then `own`. One look-up of `name`.
fn append(headers: &mut HeaderMap, name: HeaderName, own: HeaderValue) {
    match headers.entry(name) {
        Entry::Vacant(entry) => {
            entry.insert(own);
        }
        Entry::Occupied(mut entry) => {
            let Ok(own) = own.to_str() else {
                return;
            };
            let list = tollgate_http::header_value(|out| {
                for value in entry.iter().filter_map(|v| v.to_str().ok()) {
                    out.push_str(value);
                    out.push_str(", ");
                }
                out.push_str(own);
            });
            if let Ok(list) = list {
                entry.insert(list);
            }
        }
    }
}

/// Appends `ip` as its `Display` writes it (an IPv4 address, nearly every
/// request's, without `core::fmt`: see [`tollgate_http::push_ipv4`]).
fn push_ip(out: &mut String, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => tollgate_http::push_ipv4(out, v4),
        // Writing to a String cannot fail.
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_to_prior_values_and_brackets_ipv6() {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", HeaderValue::from_static("203.0.113.9"));
        headers.insert("forwarded", HeaderValue::from_static("for=203.0.113.9"));
        headers.insert("host", HeaderValue::from_static("example.com"));
        Client::new("[2001:db8::1]:443".parse().unwrap()).append_to(&mut headers);
        assert_eq!(headers["x-forwarded-for"], "203.0.113.9, 2001:db8::1");
        assert_eq!(
            headers["forwarded"],
            "for=203.0.113.9, for=\"[2001:db8::1]\";proto=http;host=\"example.com\""
        );
    }

    proptest::proptest! {
        #[test]
        fn an_address_is_written_as_display_writes_it(ip: IpAddr) {
            let mut written = String::from("x");
            push_ip(&mut written, ip);
            proptest::prop_assert_eq!(written, format!("x{ip}"));
        }
    }

    #[test]
    fn appends_after_every_prior_field_of_a_list() {
        let mut headers = HeaderMap::new();
        headers.append("x-forwarded-for", HeaderValue::from_static("198.51.100.1"));
        headers.append("x-forwarded-for", HeaderValue::from_static("203.0.113.9"));
        Client::new("192.0.2.7:80".parse().unwrap()).append_to(&mut headers);
        assert_eq!(
            headers
                .get_all("x-forwarded-for")
                .iter()
                .collect::<Vec<_>>(),
            ["198.51.100.1, 203.0.113.9, 192.0.2.7"]
        );
    }

    /// The values made for one request of a connection serve its next
    /// ones while the `Host` stays, and are made again when it changes.
    #[test]
    fn a_connection_s_values_follow_its_host() {
        let client = Client::new("192.0.2.7:80".parse().unwrap());
        let request = |host: Option<&'static str>, prior: Option<&'static str>| {
            let mut headers = HeaderMap::new();
            if let Some(host) = host {
                headers.insert(header::HOST, HeaderValue::from_static(host));
            }
            if let Some(prior) = prior {
                headers.insert("x-forwarded-for", HeaderValue::from_static(prior));
            }
            client.append_to(&mut headers);
            ["x-forwarded-for", "forwarded"].map(|name| headers[name].to_str().unwrap().to_owned())
        };
        let a = "for=192.0.2.7;proto=http;host=\"a.example\"";
        assert_eq!(request(Some("a.example"), None), ["192.0.2.7", a]);
        assert_eq!(
            request(Some("a.example"), Some("198.51.100.1")),
            ["198.51.100.1, 192.0.2.7", a]
        );
        assert_eq!(
            request(Some("b.example:8080"), None)[1],
            "for=192.0.2.7;proto=http;host=\"b.example:8080\""
        );
        assert_eq!(request(None, None)[1], "for=192.0.2.7;proto=http");
        // A host a quoted string cannot carry is left out, not escaped.
        assert_eq!(request(Some("a\"b"), None)[1], "for=192.0.2.7;proto=http");
        assert_eq!(request(Some("a.example"), None)[1], a);
    }

    #[test]
    fn each_hop_by_hop_field_is_removed_alone_and_the_others_kept() {
        let names = [
            "connection",
            "keep-alive",
            "proxy-connection",
            "proxy-authenticate",
            "proxy-authorization",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
        ];
        for name in names {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, HeaderValue::from_static("a.example"));
            headers.insert(name, HeaderValue::from_static("x"));
            headers.insert("x-end", HeaderValue::from_static("kept"));
            remove_hop_by_hop(&mut headers);
            assert_eq!(headers.len(), 2, "{name}");
            assert!(!headers.contains_key(name), "{name}");
        }
    }

    #[test]
    fn removes_the_fields_connection_lists() {
        let mut headers = HeaderMap::new();
        headers.insert("connection", HeaderValue::from_static("close, x-hop"));
        headers.insert("x-hop", HeaderValue::from_static("1"));
        headers.insert("upgrade", HeaderValue::from_static("websocket"));
        headers.insert("x-end", HeaderValue::from_static("kept"));
        remove_hop_by_hop(&mut headers);
        assert_eq!(headers.len(), 1);
        assert_eq!(headers["x-end"], "kept");
    }
}
