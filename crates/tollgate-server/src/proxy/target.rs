//! The request target in one canonical form, made once before the rules
//! look at it, so that what is decided is exactly what is forwarded.
//!
//! - An absolute-form target (`GET http://other.example/x`) becomes
//!   origin-form, and its authority replaces `Host` (RFC 9112 §3.2.2): the
//!   host the rules match is the host the upstream is asked for.
//! - The host is lower-cased, without a trailing dot (`API.Example.com.`
//!   names the same host as `api.example.com`).
//! - The path is normalised as RFC 3986 §6.2.2 says: percent-escapes of
//!   unreserved characters decoded (`%76` is `v`), the others upper-cased,
//!   repeated slashes merged, `.` and `..` segments removed (never above the
//!   root). `//v1/a`, `/./v1/a`, `/x/../v1/a` and `/%761/a` are all `/v1/a`,
//!   matched and forwarded as `/v1/a`.
//! - What has no single meaning is refused with a 400 rather than guessed:
//!   a malformed escape (`%zz`), an escaped slash or backslash (`%2F`,
//!   `%5C`: one upstream splits on them, another does not) or an escaped
//!   control byte, and more than one `Host` field.
//!
//! The query is forwarded as it came.

use std::borrow::Cow;
use std::io::Write;

use http::header::{self, HeaderValue};
use http::request::Parts;
use http::Uri;

/// Why a target has no canonical form.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadTarget {
    /// A `%` not followed by two hex digits.
    #[error("a malformed percent-escape in the path")]
    Escape,
    /// `%2F`, `%5C` or an escaped control byte.
    #[error("an escaped slash, backslash or control byte in the path")]
    Ambiguous,
    /// Several `Host` fields, or a host that is not a valid field value.
    #[error("an invalid or repeated Host")]
    Host,
    /// The rebuilt target does not parse (cannot happen for a target that
    /// parsed; refused rather than forwarded as it came).
    #[error("an invalid request target")]
    Target,
}

/// Puts `parts`' target and `Host` in their canonical form. A target and
/// `Host` already in it (nearly every request) are left untouched, without
/// a copy.
pub(crate) fn canonicalize(parts: &mut Parts) -> Result<(), BadTarget> {
    let mut hosts = parts.headers.get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(BadTarget::Host);
    }
    let rebuilt = match parts.uri.authority() {
        // The authority of an absolute-form target wins over `Host`.
        Some(authority) => Some(match authority.port() {
            Some(port) => canonical_host(&format!("{}:{port}", authority.host())).into_owned(),
            None => canonical_host(authority.host()).into_owned(),
        }),
        None => match host {
            Some(host) => match canonical_host(host.to_str().map_err(|_| BadTarget::Host)?) {
                Cow::Borrowed(_) => None,
                Cow::Owned(host) => Some(host),
            },
            None => None,
        },
    };
    if let Some(host) = rebuilt {
        let value = HeaderValue::try_from(host).map_err(|_| BadTarget::Host)?;
        parts.headers.insert(header::HOST, value);
    }
    let path = parts.uri.path();
    let normal = if path.starts_with('/') {
        normalize_path(path)?
    } else {
        // `*` (OPTIONS) or an authority-form target: nothing to normalise.
        Cow::Borrowed(path)
    };
    if parts.uri.authority().is_none() && matches!(normal, Cow::Borrowed(_)) {
        return Ok(());
    }
    let uri = match parts.uri.query() {
        Some(query) => format!("{normal}?{query}"),
        None => normal.into_owned(),
    };
    parts.uri = uri.parse::<Uri>().map_err(|_| BadTarget::Target)?;
    Ok(())
}

/// `API.Example.com.:8080` as `api.example.com:8080`; borrowed when it is
/// so already.
fn canonical_host(host: &str) -> Cow<'_, str> {
    // Bytes, not `str::rfind`: its searcher costs more than these few
    // bytes do (about 250 instructions a request, callgrind).
    let bytes = host.as_bytes();
    let (name, port) = match bytes.iter().rposition(|&b| b == b':') {
        // A bracketed IPv6 literal has colons of its own.
        Some(i) if !bytes[i..].contains(&b']') => (&host[..i], &host[i..]),
        _ => (host, ""),
    };
    let trimmed = name.strip_suffix('.').unwrap_or(name);
    if trimmed.len() == name.len() && !name.bytes().any(|b| b.is_ascii_uppercase()) {
        return Cow::Borrowed(host);
    }
    let mut out = trimmed.to_ascii_lowercase();
    out.push_str(port);
    Cow::Owned(out)
}

/// RFC 3986's unreserved characters: the same whether escaped or not.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// The normalised form of an absolute path (see the module's
/// documentation); borrowed when the path is in that form already.
pub(crate) fn normalize_path(path: &str) -> Result<Cow<'_, str>, BadTarget> {
    if is_normal(path) {
        return Ok(Cow::Borrowed(path));
    }
    rebuild(path).map(Cow::Owned)
}

/// The normalised form of an absolute path, always built anew.
fn rebuild(path: &str) -> Result<String, BadTarget> {
    let decoded = decode_unreserved(path)?;
    let mut segments: Vec<&str> = Vec::new();
    // A path ending in `/`, `/.` or `/..` names a directory: it keeps its
    // final slash.
    let mut trailing = false;
    for segment in decoded.split('/').skip(1) {
        trailing = matches!(segment, "" | "." | "..");
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let mut out = String::with_capacity(decoded.len());
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    if trailing || out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

/// Whether [`normalize_path`] would give `path` back as it is: no escape,
/// no `.` or `..` segment, no empty segment but a final one (`/`, `/v1/`).
fn is_normal(path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    let (init, last) = match rest.rsplit_once('/') {
        Some((init, last)) => (Some(init), last),
        None => (None, rest),
    };
    !path.contains('%')
        && !matches!(last, "." | "..")
        && init.is_none_or(|init| init.split('/').all(|s| !matches!(s, "" | "." | "..")))
}

/// Decodes the escapes of unreserved characters, upper-cases the others,
/// and refuses those without one meaning.
fn decode_unreserved(path: &str) -> Result<String, BadTarget> {
    if !path.contains('%') {
        return Ok(path.to_string());
    }
    let bytes = path.as_bytes();
    // Bytes, not chars: the URI parser lets UTF-8 through, copied as is.
    let mut out = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let hex = bytes.get(i + 1..i + 3).ok_or(BadTarget::Escape)?;
        let byte = std::str::from_utf8(hex)
            .ok()
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .ok_or(BadTarget::Escape)?;
        if unreserved(byte) {
            out.push(byte);
        } else if matches!(byte, b'/' | b'\\') || byte.is_ascii_control() {
            return Err(BadTarget::Ambiguous);
        } else {
            // Writing to a Vec cannot fail.
            let _ = write!(out, "%{byte:02X}");
        }
        i += 3;
    }
    // Only ASCII was decoded, and whole: the UTF-8 around it is intact.
    String::from_utf8(out).map_err(|_| BadTarget::Target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_name_the_same_resource_are_one_path() {
        for path in [
            "/v1/a",
            "//v1/a",
            "/./v1/a",
            "/x/../v1/a",
            "/%761/a",
            "/v1//a",
            "/v1/./a",
            "/../v1/a",
            "/%2e/v1/%61",
        ] {
            assert_eq!(normalize_path(path).as_deref(), Ok("/v1/a"), "{path}");
        }
        assert_eq!(normalize_path("/").as_deref(), Ok("/"));
        assert_eq!(normalize_path("/v1/").as_deref(), Ok("/v1/"));
        assert_eq!(normalize_path("/v1/a/..").as_deref(), Ok("/v1/"));
        assert_eq!(normalize_path("/..").as_deref(), Ok("/"));
        assert_eq!(normalize_path("/a%3fb%20c").as_deref(), Ok("/a%3Fb%20c"));
        assert_eq!(normalize_path("/café/%76").as_deref(), Ok("/café/v"));
        assert_eq!(normalize_path("/caf%c3%a9").as_deref(), Ok("/caf%C3%A9"));
    }

    #[test]
    fn paths_without_one_meaning_are_refused() {
        for path in ["/v1%2Fa", "/v1%2fa", "/v1%5Ca", "/a%00", "/a%7f"] {
            assert_eq!(normalize_path(path), Err(BadTarget::Ambiguous), "{path}");
        }
        for path in ["/a%", "/a%4", "/a%zz", "/a%+1"] {
            assert_eq!(normalize_path(path), Err(BadTarget::Escape), "{path}");
        }
    }

    #[test]
    fn absolute_form_takes_its_host_from_the_target() {
        let request = http::Request::get("http://Other.Example./x/../y?q=1")
            .header("host", "api.example.com")
            .body(())
            .unwrap();
        let (mut parts, ()) = request.into_parts();
        canonicalize(&mut parts).unwrap();
        assert_eq!(parts.uri, "/y?q=1");
        assert_eq!(parts.headers["host"], "other.example");
        assert_eq!(canonical_host("[::1]:80"), "[::1]:80");
        assert_eq!(canonical_host("A.b.:8080"), "a.b:8080");
    }

    #[test]
    fn a_canonical_host_is_not_copied() {
        for host in ["api.example.com", "a.b:8080", "[::1]:80", "127.0.0.1:19001"] {
            assert!(matches!(canonical_host(host), Cow::Borrowed(h) if h == host));
        }
        for (host, canonical) in [
            ("Api.example.com", "api.example.com"),
            ("a.b.:80", "a.b:80"),
        ] {
            assert!(matches!(canonical_host(host), Cow::Owned(h) if h == canonical));
        }
    }

    proptest::proptest! {
        /// The shortcut for paths already normal gives what normalising
        /// them gives; normalising twice gives what normalising once does,
        /// and the shortcut takes its result unless it kept an escape.
        #[test]
        fn the_shortcut_agrees_with_normalising(path in "/[a./%2eF]{0,12}") {
            if is_normal(&path) {
                proptest::prop_assert_eq!(rebuild(&path), Ok(path.clone()));
            }
            if let Ok(normal) = rebuild(&path) {
                proptest::prop_assert_eq!(rebuild(&normal), Ok(normal.clone()));
                if !normal.contains('%') {
                    proptest::prop_assert!(is_normal(&normal), "{} gave {}", path, normal);
                }
            }
        }
    }
}
