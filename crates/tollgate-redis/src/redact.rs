//! Store URLs as they may be shown: in errors, logs and the CLI's output.
//!
//! ```
//! use tollgate_redis::redact;
//!
//! assert_eq!(redact("redis://:s3cr3t@10.0.0.5:6379/2"), "redis://***@10.0.0.5:6379/2");
//! ```

/// Query parameters that carry a secret (`unix:///run/redis.sock?pass=...`).
const SECRET_PARAMS: [&str; 3] = ["pass", "password", "token"];

/// `url` with every credential replaced by `***`: the user-info of each
/// address (`user:password@`, as a cluster URL lists several) and the value
/// of any `pass`, `password` or `token` query parameter. Control characters
/// are escaped, so the result is safe to print whatever the input.
pub fn redact(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let (addresses, query) = match rest.split_once('?') {
        Some((addresses, query)) => (addresses, Some(query)),
        None => (rest, None),
    };
    let mut out = String::with_capacity(url.len());
    if let Some(scheme) = scheme {
        out.push_str(scheme);
        out.push_str("://");
    }
    let addresses: Vec<String> = addresses.split(',').map(without_user_info).collect();
    out.push_str(&addresses.join(","));
    if let Some(query) = query {
        out.push('?');
        let params: Vec<String> = query.split('&').map(without_secret).collect();
        out.push_str(&params.join("&"));
    }
    out.chars().flat_map(escaped).collect()
}

/// `user:password@host:port/path` as `***@host:port/path`.
fn without_user_info(address: &str) -> String {
    let authority_end = address.find('/').unwrap_or(address.len());
    match address[..authority_end].rfind('@') {
        Some(at) => format!("***{}", &address[at..]),
        None => address.to_string(),
    }
}

fn without_secret(param: &str) -> String {
    match param.split_once('=') {
        Some((name, _)) if SECRET_PARAMS.contains(&name.to_ascii_lowercase().as_str()) => {
            format!("{name}=***")
        }
        _ => param.to_string(),
    }
}

fn escaped(c: char) -> Vec<char> {
    if c.is_control() {
        c.escape_default().collect()
    } else {
        vec![c]
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn credentials_are_hidden_and_the_rest_kept() {
        let cases = [
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            ("redis://:pw@h:1", "redis://***@h:1"),
            ("redis://user:pw@h:1/0", "redis://***@h:1/0"),
            ("rediss://user@h", "rediss://***@h"),
            ("redis://u:p@ss@h:1", "redis://***@h:1"),
            (
                "redis+cluster://a:pw@h1:1,h2:2,:pw2@h3:3",
                "redis+cluster://***@h1:1,h2:2,***@h3:3",
            ),
            (
                "unix:///run/r.sock?db=1&pass=pw",
                "unix:///run/r.sock?db=1&pass=***",
            ),
            (
                "redis://h/0?Password=pw&x=1",
                "redis://h/0?Password=***&x=1",
            ),
            ("h:1@pw", "***@pw"),
            (
                "redis://h:1/\u{1b}]0;x\u{7}",
                "redis://h:1/\\u{1b}]0;x\\u{7}",
            ),
        ];
        for (url, shown) in cases {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[test]
    fn no_secret_survives() {
        for url in [
            "redis://user:s3cr3t@host:6379",
            "redis://:s3cr3t@host",
            "redis+cluster://:s3cr3t@a:1,:s3cr3t@b:2",
            "unix:///s?password=s3cr3t",
            "http://s3cr3t@x",
        ] {
            assert!(!redact(url).contains("s3cr3t"), "{url}: {}", redact(url));
        }
    }
}
