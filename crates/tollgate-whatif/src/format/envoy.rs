//! Envoy's JSON access logs: one object per line, with the field names of
//! Envoy's documented JSON example (`start_time`, `method`, `path`,
//! `authority`, `downstream_remote_address`, `x_forwarded_for`, ...). A
//! header wanted by a key is read from the field of its name, with `-` or
//! `_` (`x_api_key`); a label from the field of its name.

use serde_json::{Map, Value};

use super::Malformed;
use crate::fields::{parse_addr, split_uri, Fields, Wanted};
use crate::time;

/// The parsed object of one line, which [`fields`] borrows from.
pub fn object(line: &[u8]) -> Result<Map<String, Value>, Malformed> {
    serde_json::from_slice(line).map_err(|e| Malformed::Json(e.to_string()))
}

fn string<'a>(o: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    o.get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && *s != "-")
}

/// What the object says about its request.
pub fn fields<'a>(o: &'a Map<String, Value>, wanted: &Wanted) -> Result<Fields<'a>, Malformed> {
    let t = string(o, "start_time")
        .or_else(|| string(o, "timestamp"))
        .ok_or(Malformed::Time)?;
    let mut f = Fields {
        t_ns: Some(time::iso8601(t.as_bytes()).ok_or(Malformed::Time)?),
        method: string(o, "method").unwrap_or(""),
        host: string(o, "authority").or_else(|| string(o, "host")),
        // The direct peer, when logged, is the one the trusted-proxy rule
        // starts from; Envoy's `downstream_remote_address` may already be
        // taken from X-Forwarded-For.
        peer: string(o, "downstream_direct_remote_address")
            .or_else(|| string(o, "downstream_remote_address"))
            .and_then(parse_addr),
        ..Fields::default()
    };
    if let Some(p) = string(o, "path") {
        (f.path, f.query) = split_uri(p);
    }
    for (i, name) in wanted.headers.iter().enumerate() {
        let dashed = name.as_str();
        let underscored = dashed.replace('-', "_");
        if let Some(v) = string(o, dashed).or_else(|| string(o, &underscored)) {
            f.headers.push((i, v.as_bytes()));
        }
    }
    for (i, name) in wanted.labels.iter().enumerate() {
        if let Some(v) = o.get(name) {
            match v {
                Value::String(s) if !s.is_empty() && s != "-" => f.labels.push((i, s)),
                _ => {}
            }
        }
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderName;

    #[test]
    fn envoy_fields() {
        let wanted = Wanted {
            headers: vec![
                HeaderName::from_static("x-forwarded-for"),
                HeaderName::from_static("x-api-key"),
            ],
            labels: vec!["user".into()],
        };
        let line = br#"{"start_time":"2024-05-01T12:00:00.500Z","method":"GET","path":"/v1/a?b=1","authority":"api","downstream_remote_address":"[2001:db8::9]:5000","x_forwarded_for":"6.6.6.6","x-api-key":"k1","user":"u7","response_code":200}"#;
        let o = object(line).unwrap();
        let f = fields(&o, &wanted).unwrap();
        assert_eq!(f.t_ns, Some(1_714_564_800_500_000_000));
        assert_eq!(f.peer, "2001:db8::9".parse().ok());
        assert_eq!(
            (f.path, f.query, f.host),
            ("/v1/a", Some("b=1"), Some("api"))
        );
        assert_eq!(f.headers, [(0, &b"6.6.6.6"[..]), (1, &b"k1"[..])]);
        assert_eq!(f.labels, [(0, "u7")]);
    }

    #[test]
    fn bad_objects_are_malformed() {
        assert!(matches!(object(b"{not json"), Err(Malformed::Json(_))));
        assert!(matches!(object(b"[1]"), Err(Malformed::Json(_))));
        let o = object(br#"{"method":"GET"}"#).unwrap();
        assert_eq!(fields(&o, &Wanted::default()), Err(Malformed::Time));
    }
}
