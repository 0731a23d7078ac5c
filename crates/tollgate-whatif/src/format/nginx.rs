//! nginx-style `log_format` strings, compiled once into literals and
//! variables and matched against each line with `memchr`: the
//! nginx/Apache combined format is one such string.
//!
//! A variable ends where the literal after it starts. After a `"` the
//! literal is searched past escaped quotes (`\"`, Apache's escaping; nginx
//! writes `\x22`), so a quote inside a user agent does not end the field.
//! Anything after the format's last literal is ignored, so a format that
//! covers the first fields of a longer line still reads it.

use std::fmt;

use super::Malformed;
use crate::fields::{split_uri, Fields, Wanted};
use crate::time;

/// nginx's predefined `combined` format (Apache's is the same).
pub const COMBINED: &str = r#"$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent""#;
/// The combined format followed by `"$http_x_forwarded_for"`, as many
/// sites behind a load balancer log.
pub const COMBINED_XFF: &str = r#"$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" "$http_x_forwarded_for""#;
/// The Common Log Format.
pub const COMMON: &str =
    r#"$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent"#;

/// What a variable fills in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Var {
    RemoteAddr,
    TimeLocal,
    TimeIso,
    Msec,
    Request,
    Method,
    RequestUri,
    Uri,
    Args,
    Host,
    Header(usize),
    Label(usize),
    Skip,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Literal(Vec<u8>),
    Var(Var),
}

/// A `log_format` that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatError(String);

impl FormatError {
    /// An error with this message.
    pub fn new(message: String) -> Self {
        FormatError(message)
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FormatError {}

/// A compiled `log_format`.
#[derive(Clone, Debug)]
pub struct LogFormat {
    segments: Vec<Segment>,
    has_time: bool,
}

impl LogFormat {
    /// Compiles `format` (`combined`, `combined-xff`, `common`, or a format string), keeping
    /// only the headers and labels in `wanted`.
    pub fn compile(format: &str, wanted: &Wanted) -> Result<Self, FormatError> {
        let text = match format {
            "combined" => COMBINED,
            "combined-xff" => COMBINED_XFF,
            "common" => COMMON,
            other => other,
        };
        let mut segments = Vec::new();
        let mut literal = Vec::new();
        let b = text.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] != b'$' {
                literal.push(b[i]);
                i += 1;
                continue;
            }
            let (name, next) = if b.get(i + 1) == Some(&b'{') {
                let end = text[i + 2..].find('}').ok_or_else(|| {
                    FormatError(format!("unclosed `${{` at byte {i} of the log format"))
                })?;
                (&text[i + 2..i + 2 + end], i + 3 + end)
            } else {
                let n = b[i + 1..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                    .count();
                (&text[i + 1..i + 1 + n], i + 1 + n)
            };
            if name.is_empty() {
                return Err(FormatError(format!(
                    "`$` without a variable name at byte {i} of the log format"
                )));
            }
            if !literal.is_empty() {
                segments.push(Segment::Literal(std::mem::take(&mut literal)));
            } else if matches!(segments.last(), Some(Segment::Var(_))) {
                return Err(FormatError(format!(
                    "variable `${}` follows another with nothing between them: where one ends is unknown",
                    name.escape_debug()
                )));
            }
            segments.push(Segment::Var(variable(name, wanted)));
            i = next;
        }
        if !literal.is_empty() {
            segments.push(Segment::Literal(literal));
        }
        let has_time = segments
            .iter()
            .any(|s| matches!(s, Segment::Var(Var::TimeLocal | Var::TimeIso | Var::Msec)));
        if !has_time {
            return Err(FormatError(
                "the log format has no time: it needs $time_local, $time_iso8601 or $msec".into(),
            ));
        }
        Ok(LogFormat { segments, has_time })
    }

    /// Reads one line.
    pub fn parse<'a>(&self, line: &'a [u8]) -> Result<Fields<'a>, Malformed> {
        debug_assert!(self.has_time);
        let mut fields = Fields::default();
        let mut pos = 0;
        for (i, segment) in self.segments.iter().enumerate() {
            match segment {
                Segment::Literal(lit) => {
                    if !line[pos..].starts_with(lit) {
                        return Err(Malformed::Layout);
                    }
                    pos += lit.len();
                }
                Segment::Var(var) => {
                    let end = match self.segments.get(i + 1) {
                        Some(Segment::Literal(next)) => {
                            let quoted = pos > 0 && line[pos - 1] == b'"';
                            pos + find(&line[pos..], next, quoted).ok_or(Malformed::Layout)?
                        }
                        _ => line.len(),
                    };
                    set(&mut fields, *var, &line[pos..end])?;
                    pos = end;
                }
            }
        }
        if fields.t_ns.is_none() {
            return Err(Malformed::Time);
        }
        Ok(fields)
    }
}

fn variable(name: &str, wanted: &Wanted) -> Var {
    match name {
        "remote_addr" => Var::RemoteAddr,
        "time_local" => Var::TimeLocal,
        "time_iso8601" => Var::TimeIso,
        "msec" => Var::Msec,
        "request" => Var::Request,
        "request_method" => Var::Method,
        "request_uri" => Var::RequestUri,
        "uri" | "document_uri" => Var::Uri,
        "args" | "query_string" => Var::Args,
        "host" | "http_host" | "server_name" => Var::Host,
        _ => {
            if let Some(i) = name
                .strip_prefix("http_")
                .and_then(|h| wanted.header_index(h))
            {
                Var::Header(i)
            } else if let Some(i) = wanted.label_index(name) {
                Var::Label(i)
            } else {
                Var::Skip
            }
        }
    }
}

/// Where `needle` starts in `hay`; inside quotes, a quote escaped with a
/// backslash does not count.
fn find(hay: &[u8], needle: &[u8], quoted: bool) -> Option<usize> {
    let first = needle[0];
    let mut from = 0;
    while let Some(i) = memchr::memchr(first, &hay[from..]) {
        let at = from + i;
        let escaped = quoted && first == b'"' && at > 0 && hay[at - 1] == b'\\';
        if !escaped && hay[at..].starts_with(needle) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

fn text(value: &[u8]) -> Result<&str, Malformed> {
    std::str::from_utf8(value).map_err(|_| Malformed::Utf8)
}

/// nginx writes `-` for an empty value.
fn present(value: &[u8]) -> Option<&[u8]> {
    (!value.is_empty() && value != b"-").then_some(value)
}

fn set<'a>(f: &mut Fields<'a>, var: Var, value: &'a [u8]) -> Result<(), Malformed> {
    match var {
        Var::RemoteAddr => {
            f.peer = present(value).and_then(|v| crate::fields::parse_addr(text(v).ok()?))
        }
        Var::TimeLocal => f.t_ns = Some(time::clf(value).ok_or(Malformed::Time)?),
        Var::TimeIso => f.t_ns = Some(time::iso8601(value).ok_or(Malformed::Time)?),
        Var::Msec => f.t_ns = Some(time::msec(value).ok_or(Malformed::Time)?),
        Var::Request => {
            let request = text(value)?;
            let (method, rest) = request.split_once(' ').ok_or(Malformed::Request)?;
            let uri = rest.rsplit_once(' ').map_or(rest, |(uri, _protocol)| uri);
            if method.is_empty() || !(uri.starts_with('/') || uri.contains("://")) {
                return Err(Malformed::Request);
            }
            f.method = method;
            (f.path, f.query) = split_uri(uri);
        }
        Var::Method => f.method = text(value)?,
        Var::RequestUri => (f.path, f.query) = split_uri(text(value)?),
        Var::Uri => f.path = text(value)?,
        Var::Args => f.query = present(value).map(text).transpose()?,
        Var::Host => {
            if let Some(v) = present(value) {
                f.host = Some(text(v)?);
            }
        }
        Var::Header(i) => {
            if let Some(v) = present(value) {
                f.headers.push((i, v));
            }
        }
        Var::Label(i) => {
            if let Some(v) = present(value) {
                f.labels.push((i, text(v)?));
            }
        }
        Var::Skip => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderName;

    fn wanted() -> Wanted {
        Wanted {
            headers: vec![
                HeaderName::from_static("x-forwarded-for"),
                HeaderName::from_static("x-api-key"),
            ],
            labels: vec!["remote_user".into()],
        }
    }

    #[test]
    fn combined_lines_with_and_without_extras() {
        let f = LogFormat::compile("combined", &wanted()).unwrap();
        let line = br#"203.0.113.7 - alice [10/Oct/2000:13:55:36 -0700] "GET /v1/items/42?x=1 HTTP/1.1" 200 2326 "-" "curl/8 \"quoted\" agent" "extra""#;
        let got = f.parse(line).unwrap();
        assert_eq!(got.peer, "203.0.113.7".parse().ok());
        assert_eq!(got.t_ns, Some(971_211_336_000_000_000));
        assert_eq!(
            (got.method, got.path, got.query),
            ("GET", "/v1/items/42", Some("x=1"))
        );
        assert_eq!(got.labels, [(0, "alice")]);
        let v6 = br#"2001:db8::7 - - [10/Oct/2000:13:55:36 +0000] "POST http://h/x HTTP/2.0" 429 0 "-" "-""#;
        let got = f.parse(v6).unwrap();
        assert_eq!(got.peer, "2001:db8::7".parse().ok());
        assert_eq!(got.path, "/x");
        assert!(got.labels.is_empty());
    }

    #[test]
    fn custom_formats_read_headers_and_labels() {
        let f = LogFormat::compile(
            r#"$remote_addr [$time_iso8601] "$request" $status "$http_x_forwarded_for" key=$http_x_api_key ${remote_user}"#,
            &wanted(),
        )
        .unwrap();
        let got = f
            .parse(br#"10.0.0.1 [2000-10-10T20:55:36Z] "GET / HTTP/1.1" 200 "6.6.6.6, 203.0.113.7" key=sk-1 bob"#)
            .unwrap();
        assert_eq!(
            got.headers,
            [(0, &b"6.6.6.6, 203.0.113.7"[..]), (1, &b"sk-1"[..])]
        );
        assert_eq!(got.labels, [(0, "bob")]);
    }

    #[test]
    fn malformed_lines_say_why() {
        let f = LogFormat::compile("combined", &wanted()).unwrap();
        let cases: [(&[u8], Malformed); 5] = [
            (b"", Malformed::Layout),
            (b"garbage", Malformed::Layout),
            (br#"1.2.3.4 - - [99/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 1 "-" "-""#, Malformed::Time),
            (br#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "\x16\x03\x01" 400 1 "-" "-""#, Malformed::Request),
            (b"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET /\xff HTTP/1.1\" 200 1 \"-\" \"-\"", Malformed::Utf8),
        ];
        for (line, want) in cases {
            assert_eq!(
                f.parse(line),
                Err(want),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn unusable_formats_are_refused() {
        assert!(LogFormat::compile("$remote_addr$status [$time_local]", &wanted()).is_err());
        assert!(LogFormat::compile("$remote_addr $status", &wanted()).is_err());
        assert!(LogFormat::compile("$ [$time_local]", &wanted()).is_err());
        assert!(LogFormat::compile("${time_local", &wanted()).is_err());
    }
}
