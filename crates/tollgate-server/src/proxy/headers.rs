//! The header rewriting of a forwarded request and its response.

use std::fmt::Write;
use std::net::{IpAddr, SocketAddr};

use http::header::{self, Entry, HeaderMap, HeaderName, HeaderValue};

/// Hop-by-hop fields (RFC 9110 §7.6.1), never forwarded. A `static`, not a
/// `const`: a `const` array is built and dropped again at every use, and
/// [`is_hop_by_hop`] runs for every field of every message.
static HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Removes the hop-by-hop fields, with those `Connection` lists.
pub(crate) fn remove_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none: one look at the few names there are costs
    // less than a lookup for each of the nine.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
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

/// Whether `name` is hop-by-hop whatever `Connection` says.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name) || name == header::UPGRADE
}

/// Appends the client to `X-Forwarded-For` and `Forwarded` (RFC 7239), in
/// the form its key uses: an IPv4 client of a dual-stack socket is
/// `127.0.0.1`, not `::ffff:127.0.0.1`.
pub(crate) fn append_forwarded(headers: &mut HeaderMap, peer: SocketAddr) {
    let ip = peer.ip().to_canonical();
    // Read before the entries below borrow the map.
    let host = headers
        .get(header::HOST)
        .filter(|v| {
            v.as_bytes()
                .iter()
                .all(|b| b.is_ascii_graphic() && *b != b'"')
        })
        .cloned();
    append(headers, X_FORWARDED_FOR, |out| push_ip(out, ip));
    append(headers, header::FORWARDED, |out| {
        match ip {
            IpAddr::V4(_) => {
                out.push_str("for=");
                push_ip(out, ip);
            }
            IpAddr::V6(_) => {
                out.push_str("for=\"[");
                push_ip(out, ip);
                out.push_str("]\"");
            }
        }
        out.push_str(";proto=http");
        if let Some(host) = host.as_ref().and_then(|h| h.to_str().ok()) {
            out.push_str(";host=\"");
            out.push_str(host);
            out.push('"');
        }
    });
}

/// Replaces the `name` fields by one list: every prior field's value (a
/// list in several fields is one comma-separated list), then what `last`
/// writes. One look-up of `name`, and the value kept without an allocation
/// of its own ([`tollgate_http::header_value`]).
fn append(headers: &mut HeaderMap, name: HeaderName, last: impl FnOnce(&mut String)) {
    let written = |prior: &mut dyn Iterator<Item = &HeaderValue>| {
        tollgate_http::header_value(|out| {
            for value in prior.filter_map(|v| v.to_str().ok()) {
                out.push_str(value);
                out.push_str(", ");
            }
            last(out);
        })
    };
    match headers.entry(name) {
        Entry::Occupied(mut entry) => {
            if let Ok(value) = written(&mut entry.iter()) {
                entry.insert(value);
            }
        }
        Entry::Vacant(entry) => {
            if let Ok(value) = written(&mut std::iter::empty()) {
                entry.insert(value);
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
        append_forwarded(&mut headers, "[2001:db8::1]:443".parse().unwrap());
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
        append_forwarded(&mut headers, "192.0.2.7:80".parse().unwrap());
        assert_eq!(
            headers
                .get_all("x-forwarded-for")
                .iter()
                .collect::<Vec<_>>(),
            ["198.51.100.1, 203.0.113.9, 192.0.2.7"]
        );
    }

    #[test]
    fn each_hop_by_hop_field_is_removed_alone_and_the_others_kept() {
        for name in HOP_BY_HOP.iter().chain([&header::UPGRADE]) {
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
