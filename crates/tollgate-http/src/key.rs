//! Whose budget a request spends: [`Key`], derived from a [`RequestView`].
//!
//! A key is a pure function of the view, so the layer and an offline replay
//! of an access log derive the same key from the same request. The result is
//! text that names its parts (`ip=203.0.113.7`, `label.tenant=acme`), at most
//! [`MAX_KEY_BYTES`] long, without control bytes, and with header values
//! replaced by their [`digest`](crate::digest) unless told otherwise, so an
//! API key never reaches the store or a log.
//!
//! ```
//! use http::HeaderMap;
//! use tollgate_http::{ClientIp, Key, RequestView};
//!
//! let mut headers = HeaderMap::new();
//! headers.insert("x-api-key", "sk-secret".parse().unwrap());
//! let view = RequestView {
//!     method: "GET", path: "/v1/items", query: None, host: None, headers: &headers,
//!     peer: "192.0.2.1".parse().ok(), route: None, labels: None,
//! };
//! // The API key when there is one, else the client's address.
//! let key = Key::first_of([Key::header("x-api-key"), Key::ip()]);
//! let derived = key.derive(&view, &ClientIp::socket()).unwrap();
//! assert!(derived.starts_with("header.x-api-key="));
//! assert!(!derived.contains("sk-secret"));
//! ```

use http::HeaderName;
use serde::{Deserialize, Deserializer};

use crate::digest::push_digest;
use crate::view::Reads;
use crate::{ClientIp, IpPrefix, RequestView};

/// The longest key, in bytes, after its parts are joined. Longer keys are
/// refused with a 400 rather than stored: a client must not be able to make
/// the store hold arbitrary amounts of its data.
pub const MAX_KEY_BYTES: usize = 256;

/// Where a request's key comes from.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Key {
    /// The client's address (see [`ClientIp`]), aggregated to a prefix.
    Ip(IpPrefix),
    /// A request header, such as an API key.
    Header(HeaderKey),
    /// A [`Labels`](crate::Labels) value the service's auth layer set
    /// (`user`, `tenant`).
    Label(String),
    /// The route template that matched (axum's `MatchedPath`).
    Route,
    /// The host the client asked for.
    Host,
    /// The same key for every request: one global budget.
    Constant(String),
    /// Every part, joined (tenant and route): missing if any part is.
    All(Vec<Key>),
    /// The first part present (the API key, else the address).
    FirstOf(Vec<Key>),
}

/// A header as a key.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderKey {
    /// The header's name.
    #[serde(deserialize_with = "header_name")]
    pub name: HeaderName,
    /// Store the value's digest rather than the value (the default: header
    /// keys are usually secrets).
    #[serde(default = "yes")]
    pub hashed: bool,
}

fn yes() -> bool {
    true
}

/// Reads a header name from configuration.
pub(crate) fn header_name<'de, D: Deserializer<'de>>(d: D) -> Result<HeaderName, D::Error> {
    let name = String::deserialize(d)?;
    HeaderName::try_from(name.as_str()).map_err(|_| {
        serde::de::Error::custom(format!(
            "`{}` is not a valid header name",
            name.escape_debug()
        ))
    })
}

/// Why no key could be derived. Messages name where the key came from, never
/// its value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The request has no value for the key (no such header or label).
    #[error("the request has no {0}")]
    Missing(String),
    /// The key is longer than [`MAX_KEY_BYTES`].
    #[error("the key from the {from} is {len} bytes, more than the {MAX_KEY_BYTES} allowed")]
    TooLong {
        /// Where the key came from.
        from: String,
        /// Its length in bytes.
        len: usize,
    },
    /// The value has bytes a key cannot hold (control bytes, or not UTF-8).
    #[error("the {0} has bytes a key cannot hold (control characters or invalid UTF-8)")]
    BadBytes(String),
}

impl Key {
    /// The client's address, IPv4 /32 and IPv6 /64.
    pub fn ip() -> Key {
        Key::Ip(IpPrefix::default())
    }

    /// A header's value, stored as its digest.
    pub fn header(name: &'static str) -> Key {
        Key::Header(HeaderKey {
            name: HeaderName::from_static(name),
            hashed: true,
        })
    }

    /// A [`Labels`](crate::Labels) value.
    pub fn label(name: impl Into<String>) -> Key {
        Key::Label(name.into())
    }

    /// One budget for every request.
    pub fn constant(value: impl Into<String>) -> Key {
        Key::Constant(value.into())
    }

    /// Every part, joined.
    pub fn all(parts: impl IntoIterator<Item = Key>) -> Key {
        Key::All(parts.into_iter().collect())
    }

    /// The first part present.
    pub fn first_of(parts: impl IntoIterator<Item = Key>) -> Key {
        Key::FirstOf(parts.into_iter().collect())
    }

    /// The key of `view`, with the client's address found by `client_ip`.
    pub fn derive(&self, view: &RequestView<'_>, client_ip: &ClientIp) -> Result<String, KeyError> {
        let mut out = String::new();
        self.derive_into(view, client_ip, &mut out)?;
        Ok(out)
    }

    /// [`derive`](Key::derive), appending the key to `out` (left as it was
    /// on error).
    pub fn derive_into(
        &self,
        view: &RequestView<'_>,
        client_ip: &ClientIp,
        out: &mut String,
    ) -> Result<(), KeyError> {
        let start = out.len();
        let written = self.write(view, client_ip, out).and_then(|()| {
            let len = out.len() - start;
            if len > MAX_KEY_BYTES {
                return Err(KeyError::TooLong {
                    from: self.describe(),
                    len,
                });
            }
            Ok(())
        });
        if written.is_err() {
            out.truncate(start);
        }
        written
    }

    fn write(
        &self,
        view: &RequestView<'_>,
        client_ip: &ClientIp,
        out: &mut String,
    ) -> Result<(), KeyError> {
        match self {
            Key::Ip(prefix) => {
                let client = client_ip
                    .client(view)
                    .ok_or_else(|| KeyError::Missing(self.describe()))?;
                out.push_str("ip=");
                prefix.write_client(client, out);
            }
            Key::Header(h) => {
                let value = view
                    .headers
                    .get(&h.name)
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| KeyError::Missing(self.describe()))?;
                out.push_str("header.");
                out.push_str(h.name.as_str());
                out.push('=');
                if h.hashed {
                    push_digest(out, value.as_bytes());
                } else {
                    let text = value
                        .to_str()
                        .map_err(|_| KeyError::BadBytes(self.describe()))?;
                    self.push_raw(text, out)?;
                }
            }
            Key::Label(name) => {
                let value = view
                    .label(name)
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| KeyError::Missing(self.describe()))?;
                out.push_str("label.");
                out.push_str(name);
                out.push('=');
                self.push_raw(value, out)?;
            }
            Key::Route => {
                let route = view
                    .route
                    .ok_or_else(|| KeyError::Missing(self.describe()))?;
                out.push_str("route=");
                self.push_raw(route, out)?;
            }
            Key::Host => {
                let host = view
                    .host
                    .ok_or_else(|| KeyError::Missing(self.describe()))?;
                out.push_str("host=");
                self.push_raw(&host.to_ascii_lowercase(), out)?;
            }
            Key::Constant(value) => {
                out.push_str("const=");
                self.push_raw(value, out)?;
            }
            Key::All(parts) => {
                for (i, part) in parts.iter().enumerate() {
                    if i > 0 {
                        out.push('&');
                    }
                    part.write(view, client_ip, out)?;
                }
            }
            Key::FirstOf(parts) => {
                let start = out.len();
                for part in parts {
                    match part.write(view, client_ip, out) {
                        Err(KeyError::Missing(_)) => out.truncate(start),
                        other => return other,
                    }
                }
                return Err(KeyError::Missing(self.describe()));
            }
        }
        Ok(())
    }

    /// Appends a value verbatim, escaping the two bytes that join parts so
    /// that no value can pass for two parts, and refusing control bytes.
    fn push_raw(&self, value: &str, out: &mut String) -> Result<(), KeyError> {
        if value.chars().any(char::is_control) {
            return Err(KeyError::BadBytes(self.describe()));
        }
        if value.len() > MAX_KEY_BYTES {
            return Err(KeyError::TooLong {
                from: self.describe(),
                len: value.len(),
            });
        }
        for c in value.chars() {
            match c {
                '%' => out.push_str("%25"),
                '&' => out.push_str("%26"),
                c => out.push(c),
            }
        }
        Ok(())
    }

    /// The view's optional parts this key reads.
    pub(crate) fn reads(&self) -> Reads {
        match self {
            Key::Label(_) => Reads {
                labels: true,
                ..Reads::default()
            },
            Key::Route => Reads {
                route: true,
                ..Reads::default()
            },
            Key::Host => Reads {
                host: true,
                ..Reads::default()
            },
            Key::All(parts) | Key::FirstOf(parts) => parts
                .iter()
                .fold(Reads::default(), |reads, part| reads.and(part.reads())),
            Key::Ip(_) | Key::Header(_) | Key::Constant(_) => Reads::default(),
        }
    }

    /// Where the key comes from, for messages.
    pub fn describe(&self) -> String {
        match self {
            Key::Ip(_) => "client address".into(),
            Key::Header(h) => format!("header `{}`", h.name),
            Key::Label(name) => format!("label `{}`", name.escape_debug()),
            Key::Route => "matched route".into(),
            Key::Host => "host".into(),
            Key::Constant(_) => "constant key".into(),
            Key::All(parts) => join(parts, " and "),
            Key::FirstOf(parts) => join(parts, " or "),
        }
    }
}

fn join(parts: &[Key], sep: &str) -> String {
    parts
        .iter()
        .map(Key::describe)
        .collect::<Vec<_>>()
        .join(sep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{digest, Labels};
    use http::HeaderMap;
    use proptest::prelude::*;

    fn view<'a>(headers: &'a HeaderMap, labels: &'a Labels) -> RequestView<'a> {
        RequestView {
            method: "GET",
            path: "/v1/x",
            query: None,
            host: Some("API.example.com"),
            headers,
            peer: "2001:db8:1:2::99".parse().ok(),
            route: Some("/v1/{id}"),
            labels: Some(labels),
        }
    }

    #[test]
    fn every_kind() {
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", "secret".parse().unwrap());
        headers.insert("x-team", "blue&red".parse().unwrap());
        let labels = Labels::new().with("tenant", "acme");
        let v = view(&headers, &labels);
        let ip = ClientIp::socket();
        let d = |k: Key| k.derive(&v, &ip);
        assert_eq!(d(Key::ip()).unwrap(), "ip=2001:db8:1:2::/64");
        assert_eq!(
            d(Key::header("x-api-key")).unwrap(),
            format!("header.x-api-key={}", digest(b"secret"))
        );
        let raw = Key::Header(HeaderKey {
            name: HeaderName::from_static("x-team"),
            hashed: false,
        });
        assert_eq!(d(raw).unwrap(), "header.x-team=blue%26red");
        assert_eq!(d(Key::Route).unwrap(), "route=/v1/{id}");
        assert_eq!(d(Key::Host).unwrap(), "host=api.example.com");
        assert_eq!(d(Key::constant("all")).unwrap(), "const=all");
        assert_eq!(
            d(Key::all([Key::label("tenant"), Key::Route])).unwrap(),
            "label.tenant=acme&route=/v1/{id}"
        );
        assert_eq!(
            d(Key::first_of([Key::label("user"), Key::label("tenant")])).unwrap(),
            "label.tenant=acme"
        );
        assert_eq!(
            d(Key::all([Key::label("user"), Key::Route])),
            Err(KeyError::Missing("label `user`".into()))
        );
        assert_eq!(
            d(Key::first_of([Key::label("user")])),
            Err(KeyError::Missing("label `user`".into()))
        );
    }

    #[test]
    fn oversize_and_binary_values_are_refused() {
        let mut headers = HeaderMap::new();
        headers.insert("x-bin", http::HeaderValue::from_bytes(b"a\xffb").unwrap());
        let labels = Labels::new()
            .with("long", "x".repeat(MAX_KEY_BYTES))
            .with("ctl", "a\u{1}b");
        let v = view(&headers, &labels);
        let ip = ClientIp::socket();
        let raw = Key::Header(HeaderKey {
            name: HeaderName::from_static("x-bin"),
            hashed: false,
        });
        assert_eq!(
            raw.derive(&v, &ip),
            Err(KeyError::BadBytes("header `x-bin`".into()))
        );
        // Hashed, any bytes make a key.
        assert!(Key::header("x-bin").derive(&v, &ip).is_ok());
        assert!(matches!(
            Key::label("long").derive(&v, &ip),
            Err(KeyError::TooLong { len, .. }) if len > MAX_KEY_BYTES
        ));
        assert!(matches!(
            Key::label("ctl").derive(&v, &ip),
            Err(KeyError::BadBytes(_))
        ));
        let msg = Key::label("ctl").derive(&v, &ip).unwrap_err().to_string();
        assert!(!msg.contains('\u{1}'), "{msg}");
    }

    #[test]
    fn config_names() {
        let k: Key = serde_json::from_str(
            r#"{"first_of":[{"header":{"name":"X-Api-Key"}},{"ip":{"v6":56}},{"constant":"anon"}]}"#,
        )
        .unwrap();
        assert_eq!(
            k,
            Key::first_of([
                Key::header("x-api-key"),
                Key::Ip(IpPrefix { v4: 32, v6: 56 }),
                Key::constant("anon")
            ])
        );
        assert!(serde_json::from_str::<Key>(r#"{"header":{"name":"bad name"}}"#).is_err());
    }

    proptest! {
        // Whatever a client sends as a label, the key is bounded, free of
        // control bytes, and two different values never share a key.
        #[test]
        fn keys_are_bounded_and_injective(a in ".{0,300}", b in ".{0,300}") {
            let headers = HeaderMap::new();
            let la = Labels::new().with("t", a.clone());
            let lb = Labels::new().with("t", b.clone());
            let key = Key::all([Key::label("t"), Key::constant("c")]);
            let ip = ClientIp::socket();
            let ka = key.derive(&view(&headers, &la), &ip);
            let kb = key.derive(&view(&headers, &lb), &ip);
            if let Ok(k) = &ka {
                prop_assert!(k.len() <= MAX_KEY_BYTES);
                prop_assert!(!k.chars().any(char::is_control));
            }
            if let (Ok(x), Ok(y)) = (&ka, &kb) {
                prop_assert_eq!(x == y, a == b);
            }
        }
    }
}
