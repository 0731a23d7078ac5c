//! Whether a refusal's header fields are right, read strictly: a client
//! can only act on what parses.
//!
//! - `Retry-After` must be delta-seconds (RFC 9110: one or more digits);
//!   an HTTP-date is legal HTTP but not what a rate limiter should send, and
//!   counts as invalid here.
//! - `RateLimit` and `RateLimit-Policy` must parse as Structured Fields lists
//!   (RFC 8941, with the `sfv` crate) of items naming a policy, with `r`
//!   (remaining) and `t` (reset) in `RateLimit`, `q` (quota) in the policy,
//!   all non-negative integers (draft-ietf-httpapi-ratelimit-headers).

use http::header::RETRY_AFTER;
use http::HeaderMap;
use tollgate_http::fields::{RATELIMIT, RATELIMIT_POLICY};

/// `Retry-After` in seconds, when present and delta-seconds.
pub fn retry_after_secs(headers: &HeaderMap) -> Option<u64> {
    let mut values = headers.get_all(RETRY_AFTER).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None; // two answers are no answer
    }
    let bytes = value.as_bytes();
    if bytes.is_empty() || bytes.len() > 19 || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// Whether every `RateLimit` field is a valid list with at least one
/// member, each with non-negative integer `r` and `t`.
pub fn ratelimit_valid(headers: &HeaderMap) -> bool {
    valid_list(headers, RATELIMIT, &["r", "t"])
}

/// Whether every `RateLimit-Policy` field is a valid list with at least one
/// member, each with a non-negative integer `q`.
pub fn policy_valid(headers: &HeaderMap) -> bool {
    valid_list(headers, RATELIMIT_POLICY, &["q"])
}

fn valid_list(headers: &HeaderMap, name: http::HeaderName, params: &[&str]) -> bool {
    let mut any = false;
    for value in headers.get_all(name) {
        let Ok(list) = sfv::Parser::parse_list(value.as_bytes()) else {
            return false;
        };
        for entry in list {
            let sfv::ListEntry::Item(item) = entry else {
                return false;
            };
            let named = item.bare_item.as_str().is_some() || item.bare_item.as_token().is_some();
            let numbers = params.iter().all(|p| {
                item.params
                    .get(*p)
                    .and_then(|v| v.as_int())
                    .is_some_and(|i| i >= 0)
            });
            if !(named && numbers) {
                return false;
            }
            any = true;
        }
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_http::fields::{limit_field, policy_field, LimitItem, PolicyItem};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn what_tollgate_writes_is_valid() {
        let policy = policy_field(&[PolicyItem {
            name: "per-key",
            quota: 100,
            window: 60,
            unit: None,
            partition: Some(b"k"),
        }]);
        let limit = limit_field(&[LimitItem {
            name: "per-key",
            remaining: 0,
            reset: 3,
            partition: None,
        }]);
        let h = headers(&[
            ("retry-after", "3"),
            ("ratelimit", &limit),
            ("ratelimit-policy", &policy),
        ]);
        assert_eq!(retry_after_secs(&h), Some(3));
        assert!(ratelimit_valid(&h));
        assert!(policy_valid(&h));
    }

    #[test]
    fn anything_else_is_not() {
        for ra in [
            "",
            "-1",
            "1.5",
            " 3",
            "Wed, 21 Oct 2015 07:28:00 GMT",
            "99999999999999999999",
        ] {
            assert_eq!(
                retry_after_secs(&headers(&[("retry-after", ra)])),
                None,
                "{ra:?}"
            );
        }
        assert_eq!(
            retry_after_secs(&headers(&[("retry-after", "1"), ("retry-after", "2")])),
            None
        );
        assert_eq!(retry_after_secs(&HeaderMap::new()), None);
        for rl in [
            "",
            "\"a\";r=1",
            "\"a\";r=-1;t=1",
            "(\"a\");r=1;t=1",
            "remaining=0, reset=30",
            "\"a\";r=1;t=1, x",
        ] {
            assert!(!ratelimit_valid(&headers(&[("ratelimit", rl)])), "{rl:?}");
        }
        assert!(!ratelimit_valid(&HeaderMap::new()));
        assert!(!policy_valid(&headers(&[(
            "ratelimit-policy",
            "\"a\";w=60"
        )])));
    }
}
