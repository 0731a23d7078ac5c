//! The client's IP address, and the prefix its budget is kept under.
//!
//! Behind a load balancer the socket's peer is the proxy, and the client is
//! named by a header the proxies append to. Only hops appended by proxies we
//! trust can be believed, so [`ClientIp`] walks the header from the right (the
//! hop nearest to us), skips addresses inside the trusted CIDRs and takes the
//! first one outside them. Everything to its left was written by the client
//! itself and is ignored: a client that sends its own `X-Forwarded-For`
//! cannot choose its key.
//!
//! ```
//! use tollgate_http::{ClientIp, ForwardedHeader};
//!
//! let ip = ClientIp::behind(["10.0.0.0/8".parse().unwrap()], ForwardedHeader::XForwardedFor);
//! let headers = [("x-forwarded-for", "6.6.6.6, 203.0.113.7, 10.0.0.2")];
//! let client = ip.resolve_from("10.0.0.1".parse().ok(), headers.iter().map(|(_, v)| v.as_bytes()));
//! assert_eq!(client, Some("203.0.113.7".parse().unwrap())); // never the spoofed 6.6.6.6
//! ```

use std::fmt::Write;
use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;
use serde::Deserialize;

use crate::RequestView;

/// Which header the trusted proxies write the client's address into.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1`.
    Forwarded,
}

/// Made at compile time: `from_static` at run time checks every byte, on
/// every request.
const X_FORWARDED_FOR: http::HeaderName = http::HeaderName::from_static("x-forwarded-for");

impl ForwardedHeader {
    fn name(self) -> http::HeaderName {
        match self {
            ForwardedHeader::XForwardedFor => X_FORWARDED_FOR,
            ForwardedHeader::Forwarded => http::header::FORWARDED,
        }
    }
}

/// How to find the client's address: the socket peer, or, when the peer is a
/// trusted proxy, the first untrusted hop of a forwarding header counted from
/// the right.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientIp {
    /// Networks whose hops are proxies of ours. Empty: headers are ignored and
    /// the socket peer is the client.
    #[serde(default)]
    pub trusted_proxies: Vec<IpNet>,
    /// The header those proxies append to.
    #[serde(default)]
    pub header: ForwardedHeader,
}

impl ClientIp {
    /// The socket peer is the client; forwarding headers are ignored.
    pub fn socket() -> Self {
        ClientIp::default()
    }

    /// Behind the proxies in `trusted`, which append to `header`.
    pub fn behind(trusted: impl IntoIterator<Item = IpNet>, header: ForwardedHeader) -> Self {
        ClientIp {
            trusted_proxies: trusted.into_iter().collect(),
            header,
        }
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        self.trusted_proxies.iter().any(|net| net.contains(&ip))
    }

    /// The client's address for `view`, `None` when the peer is unknown.
    pub fn resolve(&self, view: &RequestView<'_>) -> Option<IpAddr> {
        self.client(view).map(|client| client.ip)
    }

    /// [`resolve`](ClientIp::resolve), with the hop's text when it can be
    /// copied into a key as it is.
    pub(crate) fn client<'v>(&self, view: &RequestView<'v>) -> Option<Client<'v>> {
        let lines = view.headers.get_all(self.header.name());
        // Visible ASCII, nearly every line, is text without a UTF-8 check.
        let text = |line: &'v http::HeaderValue| {
            line.to_str()
                .ok()
                .or_else(|| std::str::from_utf8(line.as_bytes()).ok())
        };
        self.walk(view.peer, lines.iter().map(text))
    }

    /// The client's address given the socket `peer` and the lines of the
    /// forwarding header in arrival order.
    ///
    /// A hop that is not an address (`unknown`, an obfuscated RFC 7239 name,
    /// garbage) ends the walk at the last trusted hop: the proxy that wrote
    /// it is the nearest address we can vouch for.
    pub fn resolve_from<'h>(
        &self,
        peer: Option<IpAddr>,
        lines: impl DoubleEndedIterator<Item = &'h [u8]>,
    ) -> Option<IpAddr> {
        self.walk(peer, lines.map(|line| std::str::from_utf8(line).ok()))
            .map(|client| client.ip)
    }

    /// The walk over `lines`, each the line's text or `None` for a line
    /// that is not text.
    fn walk<'h>(
        &self,
        peer: Option<IpAddr>,
        lines: impl DoubleEndedIterator<Item = Option<&'h str>>,
    ) -> Option<Client<'h>> {
        let mut nearest = Client::address(peer?);
        if !self.trusts(nearest.ip) {
            return Some(nearest);
        }
        for line in lines.rev() {
            // A line that is not text ends the walk, whatever its hops.
            let Some(line) = line else {
                return Some(nearest);
            };
            for hop in hops_from_the_right(line) {
                let parsed = match self.header {
                    ForwardedHeader::XForwardedFor => hop_address(hop),
                    ForwardedHeader::Forwarded => {
                        forwarded_for(hop).and_then(parse_hop).map(Client::address)
                    }
                };
                let Some(client) = parsed else {
                    return Some(nearest);
                };
                if !self.trusts(client.ip) {
                    return Some(client);
                }
                nearest = client;
            }
        }
        Some(nearest)
    }
}

/// The comma-separated hops of `line`, the nearest (rightmost) first.
fn hops_from_the_right(line: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(line);
    std::iter::from_fn(move || {
        let text = rest?;
        // A byte search: `str::rsplit`'s searcher costs more than a short
        // line does.
        match text.bytes().rposition(|b| b == b',') {
            Some(comma) => {
                rest = text.get(..comma);
                text.get(comma + 1..)
            }
            None => rest.take(),
        }
    })
}

/// The client's address, with the text of the hop that named it when that
/// text is the address's canonical form (a plain dotted quad): a key then
/// copies the text rather than formatting the address again.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Client<'h> {
    ip: IpAddr,
    text: Option<&'h str>,
}

impl Client<'_> {
    /// `ip`, canonical, with no text to copy.
    fn address(ip: IpAddr) -> Self {
        Client {
            ip: canonical(ip),
            text: None,
        }
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// The `for=` value of one RFC 7239 element (`for=1.2.3.4;proto=https`).
fn forwarded_for(element: &str) -> Option<&str> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then(|| value.trim().trim_matches('"'))
    })
}

/// The client a forwarding hop names, with the plain IPv4 address that
/// nearly every hop is read without the general parser ([`parse_hop`]).
fn hop_address(hop: &str) -> Option<Client<'_>> {
    let trimmed = hop.trim_ascii();
    match dotted_quad(trimmed.as_bytes()) {
        // Leading zeros refused, so the text is the canonical form.
        Some(v4) => Some(Client {
            ip: IpAddr::V4(v4),
            text: Some(trimmed),
        }),
        None => parse_hop(hop).map(Client::address),
    }
}

/// `a.b.c.d` exactly as `Ipv4Addr`'s parser accepts it (four decimal
/// octets up to 255, no leading zero, nothing else), in one pass over the
/// bytes.
fn dotted_quad(text: &[u8]) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut rest = text;
    for (i, octet) in octets.iter_mut().enumerate() {
        let (value, after) = decimal_octet(rest)?;
        *octet = value;
        rest = match (i, after) {
            (3, []) => after,
            (0..=2, [b'.', tail @ ..]) => tail,
            _ => return None,
        };
    }
    Some(Ipv4Addr::from(octets))
}

/// The number from 0 to 255 that `text` starts with, written without a
/// leading zero, and the bytes after it.
fn decimal_octet(text: &[u8]) -> Option<(u8, &[u8])> {
    let digit = |b: &u8| u16::from(b - b'0');
    let (value, rest) = match text {
        [a, b, c, rest @ ..] if [a, b, c].iter().all(|d| d.is_ascii_digit()) && *a != b'0' => {
            (digit(a) * 100 + digit(b) * 10 + digit(c), rest)
        }
        [a, b, rest @ ..] if a.is_ascii_digit() && b.is_ascii_digit() && *a != b'0' => {
            (digit(a) * 10 + digit(b), rest)
        }
        [a, rest @ ..] if a.is_ascii_digit() => (digit(a), rest),
        _ => return None,
    };
    // A digit after the longest number read: a fourth digit, or a number
    // with a leading zero.
    if rest.first().is_some_and(u8::is_ascii_digit) {
        return None;
    }
    Some((u8::try_from(value).ok()?, rest))
}

/// An address as proxies and access logs write it: `1.2.3.4`,
/// `1.2.3.4:80`, `2001:db8::1` or `[2001:db8::1]:80` (spaces around it
/// ignored).
pub fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    if let Ok(ip) = hop.parse() {
        return Some(ip);
    }
    if let Some(rest) = hop.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    let (host, port) = hop.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// How many leading bits of an address name one client: all 32 of an IPv4
/// address, and the /64 of an IPv6 one, since a single host is usually given
/// a whole /64 and can rotate through it at will.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IpPrefix {
    /// Prefix length for IPv4 addresses, 0 to 32.
    pub v4: u8,
    /// Prefix length for IPv6 addresses, 0 to 128.
    pub v6: u8,
}

impl Default for IpPrefix {
    fn default() -> Self {
        IpPrefix { v4: 32, v6: 64 }
    }
}

impl IpPrefix {
    /// The network `ip` belongs to, written as the key part: the bare address
    /// for a full-length prefix, `network/len` otherwise. Lengths past the
    /// family's width count as the full width.
    pub fn network(&self, ip: IpAddr) -> String {
        let mut out = String::new();
        self.write_network(ip, &mut out);
        out
    }

    /// [`network`](IpPrefix::network) of `client`, appended to `out`: a
    /// full-length IPv4 prefix copies the hop's text when there is one.
    pub(crate) fn write_client(&self, client: Client<'_>, out: &mut String) {
        match client.text {
            Some(text) if self.v4 >= 32 => out.push_str(text),
            _ => self.write_network(client.ip, out),
        }
    }

    /// [`network`](IpPrefix::network), appended to `out`.
    pub fn write_network(&self, ip: IpAddr, out: &mut String) {
        let (len, full) = match ip {
            IpAddr::V4(_) => (self.v4.min(32), 32),
            IpAddr::V6(_) => (self.v6.min(128), 128),
        };
        match ip {
            // The common case, on every request: no formatting machinery.
            IpAddr::V4(v4) if len == full => push_ipv4(out, v4),
            _ => {
                let net = IpNet::new(ip, len).map_or(IpNet::from(ip), |n| n.trunc());
                let _ = if len == full {
                    write!(out, "{}", net.addr())
                } else {
                    write!(out, "{net}")
                };
            }
        }
    }
}

/// Appends `ip` as its `Display` writes it (`192.0.2.1`), digit by digit:
/// through `core::fmt` each octet goes through a padding formatter, about
/// 700 instructions an address (callgrind), and a `push_str` per octet costs
/// a copy call each. The layer's key and the proxy's forwarding headers
/// write one on nearly every request.
#[inline]
pub fn push_ipv4(out: &mut String, ip: std::net::Ipv4Addr) {
    for (i, octet) in ip.octets().into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        if octet >= 100 {
            out.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            out.push(char::from(b'0' + octet / 10 % 10));
        }
        out.push(char::from(b'0' + octet % 10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(ip: &ClientIp, peer: &str, lines: &[&str]) -> Option<IpAddr> {
        ip.resolve_from(peer.parse().ok(), lines.iter().map(|l| l.as_bytes()))
    }

    fn xff_behind(nets: &[&str]) -> ClientIp {
        ClientIp::behind(
            nets.iter().map(|n| n.parse().unwrap()),
            ForwardedHeader::XForwardedFor,
        )
    }

    #[test]
    fn untrusted_peer_ignores_headers() {
        let ip = ClientIp::socket();
        assert_eq!(
            resolve(&ip, "198.51.100.1", &["6.6.6.6"]),
            "198.51.100.1".parse().ok()
        );
        let ip = xff_behind(&["10.0.0.0/8"]);
        assert_eq!(
            resolve(&ip, "198.51.100.1", &["6.6.6.6"]),
            "198.51.100.1".parse().ok()
        );
    }

    #[test]
    fn walks_from_the_right_over_lines_and_hops() {
        let ip = xff_behind(&["10.0.0.0/8", "192.168.0.0/16"]);
        let got = resolve(
            &ip,
            "10.0.0.1",
            &["1.1.1.1, 203.0.113.5", "192.168.1.1, 10.9.9.9"],
        );
        assert_eq!(got, "203.0.113.5".parse().ok());
        // Every hop trusted: the leftmost one we could vouch for.
        assert_eq!(
            resolve(&ip, "10.0.0.1", &["10.1.1.1"]),
            "10.1.1.1".parse().ok()
        );
        assert_eq!(resolve(&ip, "10.0.0.1", &[]), "10.0.0.1".parse().ok());
    }

    #[test]
    fn garbage_stops_at_the_nearest_trusted_hop() {
        let ip = xff_behind(&["10.0.0.0/8"]);
        assert_eq!(
            resolve(&ip, "10.0.0.1", &["1.2.3.4, bogus, 10.0.0.3"]),
            "10.0.0.3".parse().ok()
        );
        assert_eq!(resolve(&ip, "10.0.0.1", &[]), "10.0.0.1".parse().ok());
        let binary: &[u8] = b"\xff\xfe";
        assert_eq!(
            ip.resolve_from("10.0.0.1".parse().ok(), [binary].into_iter()),
            "10.0.0.1".parse().ok()
        );
    }

    #[test]
    fn ports_brackets_and_mapped_addresses() {
        let ip = xff_behind(&["10.0.0.0/8"]);
        assert_eq!(
            resolve(&ip, "10.0.0.1", &["1.2.3.4:555"]),
            "1.2.3.4".parse().ok()
        );
        assert_eq!(
            resolve(&ip, "10.0.0.1", &["[2001:db8::1]:443"]),
            "2001:db8::1".parse().ok()
        );
        assert_eq!(
            resolve(&ip, "::ffff:10.0.0.1", &["::ffff:1.2.3.4"]),
            "1.2.3.4".parse().ok()
        );
    }

    #[test]
    fn rfc7239_forwarded() {
        let ip = ClientIp::behind(["10.0.0.0/8".parse().unwrap()], ForwardedHeader::Forwarded);
        let got = resolve(
            &ip,
            "10.0.0.1",
            &[r#"for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.2"#],
        );
        assert_eq!(got, "2001:db8:cafe::17".parse().ok());
        assert_eq!(
            resolve(&ip, "10.0.0.1", &["for=unknown, for=10.0.0.2"]),
            "10.0.0.2".parse().ok()
        );
    }

    proptest::proptest! {
        // Whatever a client writes in front of the hops our proxies append,
        // its key does not change.
        #[test]
        fn a_client_cannot_choose_its_address(spoof in "[ -~]{0,80}", client in proptest::prelude::any::<[u8; 4]>()) {
            let ip = xff_behind(&["10.0.0.0/8"]);
            let client = IpAddr::from(client);
            proptest::prop_assume!(!ip.trusts(client));
            let honest = format!("{client}, 10.0.0.7");
            let spoofed = format!("{spoof}, {client}, 10.0.0.7");
            proptest::prop_assert_eq!(resolve(&ip, "10.0.0.1", &[&honest]), Some(client));
            proptest::prop_assert_eq!(resolve(&ip, "10.0.0.1", &[&spoof, &honest]), Some(client));
            proptest::prop_assert_eq!(resolve(&ip, "10.0.0.1", &[&spoofed]), Some(client));
        }

        #[test]
        fn full_v4_addresses_written_as_displayed(octets in proptest::prelude::any::<[u8; 4]>()) {
            let ip = Ipv4Addr::from(octets);
            proptest::prop_assert_eq!(IpPrefix::default().network(IpAddr::V4(ip)), ip.to_string());
        }

        #[test]
        fn hops_split_as_rsplit_splits(line in "[ ,0-9.a\u{e9}]{0,24}") {
            let ours: Vec<&str> = hops_from_the_right(&line).collect();
            let std: Vec<&str> = line.rsplit(',').collect();
            proptest::prop_assert_eq!(ours, std);
        }

        // The fast path reads a hop exactly as the general parser does, and
        // the text it keeps is the address's own form.
        #[test]
        fn hops_read_as_the_general_parser_reads_them(hop in "[ 0-9.:a-f\\[\\]]{0,20}|[ ]?[0-9]{1,4}\\.[0-9]{1,4}\\.[0-9]{1,4}\\.[0-9]{1,4}[ ]?") {
            let general = hop.trim().parse::<IpAddr>().ok();
            let fast = dotted_quad(hop.trim_ascii().as_bytes()).map(IpAddr::V4);
            if fast.is_some() {
                proptest::prop_assert_eq!(fast, general);
            }
            if let Some(IpAddr::V4(_)) = general {
                proptest::prop_assert_eq!(fast, general);
            }
            let client = hop_address(&hop);
            proptest::prop_assert_eq!(client.map(|c| c.ip), parse_hop(&hop).map(canonical));
            // The text a key copies is the address as it would be written.
            if let Some(Client { ip, text: Some(text) }) = client {
                proptest::prop_assert_eq!(text, ip.to_string());
            }
        }
    }

    #[test]
    fn a_line_that_is_not_text_ends_the_walk() {
        let ip = xff_behind(&["10.0.0.0/8"]);
        let peer = "10.0.0.1".parse().ok();
        let line: &[u8] = b"\xff, 203.0.113.7";
        assert_eq!(ip.resolve_from(peer, [line].into_iter()), peer);
        let text = "\u{e9}, 203.0.113.7";
        assert_eq!(
            ip.resolve_from(peer, [text.as_bytes()].into_iter()),
            "203.0.113.7".parse().ok()
        );
    }

    #[test]
    fn prefixes() {
        let p = IpPrefix::default();
        assert_eq!(p.network("192.0.2.9".parse().unwrap()), "192.0.2.9");
        assert_eq!(p.network("0.10.255.1".parse().unwrap()), "0.10.255.1");
        assert_eq!(
            p.network("2001:db8:1:2:aaaa::1".parse().unwrap()),
            "2001:db8:1:2::/64"
        );
        let p = IpPrefix { v4: 24, v6: 200 };
        assert_eq!(p.network("192.0.2.9".parse().unwrap()), "192.0.2.0/24");
        assert_eq!(p.network("2001:db8::1".parse().unwrap()), "2001:db8::1");
    }
}
