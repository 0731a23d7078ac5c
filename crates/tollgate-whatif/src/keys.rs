//! Keys of logged requests, derived by the HTTP layer's own code
//! ([`tollgate_http::Key::derive_into`] over a [`RequestView`]), and a short
//! syntax for them on the command line.

use std::fmt;

use http::{HeaderMap, HeaderValue};
use tollgate_http::{HeaderKey, IpPrefix, Key, Labels, RequestView};

use crate::fields::{Fields, Wanted};

/// A key written on the command line that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySpecError(String);

impl fmt::Display for KeySpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KeySpecError {}

/// Reads a key: `ip`, `ip/56` (IPv6 prefix), `ip/24/56` (IPv4 and IPv6
/// prefixes), `header:x-api-key` (stored as its digest),
/// `header:x-team:raw`, `field:user` (any logged field, a label to the HTTP
/// layer), `route`, `host`, `const:all`; `a+b` joins parts, `a|b` takes the
/// first present (`+` binds tighter). A JSON object is read as the server
/// configuration's `key`.
///
/// ```
/// use tollgate_http::Key;
/// use tollgate_whatif::keys::parse_key;
///
/// assert_eq!(
///     parse_key("header:x-api-key|ip").unwrap(),
///     Key::first_of([Key::header("x-api-key"), Key::ip()])
/// );
/// ```
pub fn parse_key(spec: &str) -> Result<Key, KeySpecError> {
    let spec = spec.trim();
    if spec.starts_with('{') {
        return serde_json::from_str(spec)
            .map_err(|e| KeySpecError(format!("key `{}`: {e}", spec.escape_debug())));
    }
    let alternatives: Vec<&str> = spec.split('|').collect();
    if alternatives.len() > 1 {
        return alternatives
            .iter()
            .map(|a| parse_all(a))
            .collect::<Result<_, _>>()
            .map(Key::FirstOf);
    }
    parse_all(spec)
}

fn parse_all(spec: &str) -> Result<Key, KeySpecError> {
    let parts: Vec<&str> = spec.split('+').collect();
    if parts.len() > 1 {
        return parts
            .iter()
            .map(|p| part(p.trim()))
            .collect::<Result<_, _>>()
            .map(Key::All);
    }
    part(spec.trim())
}

fn part(spec: &str) -> Result<Key, KeySpecError> {
    let bad = |why: &str| KeySpecError(format!("key part `{}`: {why}", spec.escape_debug()));
    let prefix = |t: &str| {
        t.parse::<u8>()
            .map_err(|_| bad("a prefix length is a number"))
    };
    let (kind, rest) = spec.split_once(':').unwrap_or((spec, ""));
    match kind {
        "ip" if rest.is_empty() => Ok(Key::ip()),
        "route" if rest.is_empty() => Ok(Key::Route),
        "host" if rest.is_empty() => Ok(Key::Host),
        "const" | "constant" => Ok(Key::constant(rest)),
        "field" | "label" if !rest.is_empty() => Ok(Key::label(rest)),
        "header" => {
            let (name, raw) = match rest.strip_suffix(":raw") {
                Some(name) => (name, true),
                None => (rest, false),
            };
            let name = http::HeaderName::try_from(name).map_err(|_| bad("not a header name"))?;
            Ok(Key::Header(HeaderKey { name, hashed: !raw }))
        }
        _ if spec.starts_with("ip/") => {
            let lens: Vec<&str> = spec[3..].split('/').collect();
            let p = match lens[..] {
                [v6] => IpPrefix { v6: prefix(v6)?, ..IpPrefix::default() },
                [v4, v6] => IpPrefix { v4: prefix(v4)?, v6: prefix(v6)? },
                _ => return Err(bad("expected ip/V6 or ip/V4/V6")),
            };
            if p.v4 > 32 || p.v6 > 128 {
                return Err(bad("prefixes are at most 32 (IPv4) and 128 (IPv6)"));
            }
            Ok(Key::Ip(p))
        }
        _ => Err(bad(
            "expected ip, ip/V6, ip/V4/V6, header:NAME[:raw], field:NAME, route, host or const:VALUE",
        )),
    }
}

/// Builds [`RequestView`]s from [`Fields`], reusing one header map.
#[derive(Debug, Default)]
pub struct Views {
    headers: HeaderMap,
}

impl Views {
    /// Calls `f` with the view of `fields`, whose route is `route`.
    pub fn with<R>(
        &mut self,
        wanted: &Wanted,
        fields: &Fields<'_>,
        route: Option<&str>,
        f: impl FnOnce(&RequestView<'_>) -> R,
    ) -> R {
        self.headers.clear();
        for &(i, value) in &fields.headers {
            // A value no HTTP request could carry is left out, as the
            // server would never have seen it.
            if let Ok(v) = HeaderValue::from_bytes(value) {
                self.headers.append(wanted.headers[i].clone(), v);
            }
        }
        let labels = (!fields.labels.is_empty()).then(|| {
            let mut l = Labels::new();
            for &(i, v) in &fields.labels {
                l.set(wanted.labels[i].clone(), v);
            }
            l
        });
        let view = RequestView {
            method: fields.method,
            path: fields.path,
            query: fields.query,
            host: fields.host,
            headers: &self.headers,
            peer: fields.peer,
            route,
            labels: labels.as_ref(),
        };
        f(&view)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_syntax() {
        assert_eq!(parse_key("ip").unwrap(), Key::ip());
        assert_eq!(
            parse_key("ip/56").unwrap(),
            Key::Ip(IpPrefix { v4: 32, v6: 56 })
        );
        assert_eq!(
            parse_key("ip/24/48").unwrap(),
            Key::Ip(IpPrefix { v4: 24, v6: 48 })
        );
        assert_eq!(
            parse_key("field:user+route|ip").unwrap(),
            Key::first_of([Key::all([Key::label("user"), Key::Route]), Key::ip()])
        );
        assert_eq!(
            parse_key("header:X-Team:raw").unwrap(),
            Key::Header(HeaderKey {
                name: http::HeaderName::from_static("x-team"),
                hashed: false
            })
        );
        assert_eq!(
            parse_key(r#"{"constant":"x"}"#).unwrap(),
            Key::constant("x")
        );
        for bad in [
            "",
            "ipv4",
            "ip/200",
            "ip/a",
            "header:bad name",
            "field:",
            "route:x",
            "{",
        ] {
            assert!(parse_key(bad).is_err(), "{bad}");
        }
    }
}
