//! The header fields a rate limit answers with, formatted in one place for
//! both directions of HTTP (the server layer writes them; a client reading
//! them will parse the same syntax here).
//!
//! - `Retry-After`: whole seconds, rounded up and at least 1 (RFC 9110), so
//!   a client that waits what it is told is never early;
//! - `RateLimit-Policy` and `RateLimit` of the IETF httpapi draft
//!   (draft-ietf-httpapi-ratelimit-headers, the Structured Fields syntax of
//!   its current revisions): one list member per rule, named after it, with
//!   `q` (quota), `w` (window, seconds), `qu` (unit) and `pk` (partition
//!   key) in the policy and `r` (remaining) and `t` (seconds to reset) in the
//!   limit;
//! - legacy `X-RateLimit-Limit`, `-Remaining`, `-Reset` (seconds from now).
//!
//! ```
//! use tollgate_http::fields::{limit_field, policy_field, retry_after_secs, LimitItem, PolicyItem};
//!
//! let policy = PolicyItem { name: "per-key", quota: 100, window: 60, unit: None, partition: None };
//! let limit = LimitItem { name: "per-key", remaining: 0, reset: 1, partition: None };
//! assert_eq!(policy_field(&[policy]), r#""per-key";q=100;w=60"#);
//! assert_eq!(limit_field(&[limit]), r#""per-key";r=0;t=1"#);
//! assert_eq!(retry_after_secs(600_000_000), 1); // 0.6 s is 1 s, never 0
//! ```

use base64::Engine;
use http::HeaderName;

/// `RateLimit-Policy`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit` (legacy).
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining` (legacy).
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset` (legacy, seconds from now).
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

const NS_PER_SEC: u64 = 1_000_000_000;

/// Nanoseconds as whole seconds, rounded up.
pub fn secs_up(ns: u64) -> u64 {
    ns.div_ceil(NS_PER_SEC)
}

/// A `Retry-After` value: seconds rounded up, at least 1.
pub fn retry_after_secs(ns: u64) -> u64 {
    secs_up(ns).max(1)
}

/// One member of `RateLimit-Policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyItem<'a> {
    /// The policy's name (the rule's).
    pub name: &'a str,
    /// `q`: quota units per window.
    pub quota: u64,
    /// `w`: the window in seconds.
    pub window: u64,
    /// `qu`: the unit, when not requests.
    pub unit: Option<&'a str>,
    /// `pk`: the partition the numbers apply to.
    pub partition: Option<&'a [u8]>,
}

/// One member of `RateLimit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitItem<'a> {
    /// The policy's name (the rule's).
    pub name: &'a str,
    /// `r`: units left.
    pub remaining: u64,
    /// `t`: seconds until the quota is back.
    pub reset: u64,
    /// `pk`: the partition the numbers apply to.
    pub partition: Option<&'a [u8]>,
}

/// Whether `name` can be a policy name: printable ASCII, so it is written as
/// a Structured Fields string without loss.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| (0x20..0x7f).contains(&b))
}

fn sf_string(out: &mut String, s: &str) {
    out.push('"');
    if s.contains(['"', '\\']) {
        for c in s.chars() {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    } else {
        out.push_str(s);
    }
    out.push('"');
}

fn sf_bytes(out: &mut String, bytes: &[u8]) {
    out.push(':');
    out.push_str(&base64::engine::general_purpose::STANDARD.encode(bytes));
    out.push(':');
}

/// The `RateLimit-Policy` value listing `items`.
pub fn policy_field(items: &[PolicyItem<'_>]) -> String {
    join(items, write_policy_item)
}

/// The `RateLimit` value listing `items`.
pub fn limit_field(items: &[LimitItem<'_>]) -> String {
    join(items, write_limit_item)
}

fn join<T>(items: &[T], write: fn(&mut String, &T)) -> String {
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write(&mut out, item);
    }
    out
}

/// Appends one `RateLimit-Policy` member to `out`.
pub fn write_policy_item(out: &mut String, p: &PolicyItem<'_>) {
    sf_string(out, p.name);
    write_parameters(
        out,
        [(";q=", p.quota), (";w=", p.window)],
        p.unit,
        p.partition,
    );
}

/// Appends one `RateLimit` member to `out`.
pub fn write_limit_item(out: &mut String, l: &LimitItem<'_>) {
    sf_string(out, l.name);
    write_limit_parameters(out, l.remaining, l.reset, l.partition);
}

/// `name` as a member's name is written (a Structured Fields string), for
/// a caller that writes the same name many times.
pub(crate) fn member_name(name: &str) -> String {
    let mut out = String::new();
    sf_string(&mut out, name);
    out
}

/// The parameters of a `RateLimit` member, appended after its name
/// ([`member_name`]).
pub(crate) fn write_limit_parameters(
    out: &mut String,
    remaining: u64,
    reset: u64,
    partition: Option<&[u8]>,
) {
    write_parameters(out, [(";r=", remaining), (";t=", reset)], None, partition);
}

/// `;a=1;b=2;qu="unit";pk=:bytes:`, each number's key given with its `;`
/// and `=`.
fn write_parameters(
    out: &mut String,
    numbers: [(&str, u64); 2],
    unit: Option<&str>,
    partition: Option<&[u8]>,
) {
    let mut digits = itoa::Buffer::new();
    for (key, value) in numbers {
        out.push_str(key);
        out.push_str(digits.format(value));
    }
    if let Some(unit) = unit {
        out.push_str(";qu=");
        sf_string(out, unit);
    }
    if let Some(pk) = partition {
        out.push_str(";pk=");
        sf_bytes(out, pk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_up() {
        assert_eq!(secs_up(0), 0);
        assert_eq!(secs_up(1), 1);
        assert_eq!(secs_up(NS_PER_SEC), 1);
        assert_eq!(secs_up(NS_PER_SEC + 1), 2);
        assert_eq!(retry_after_secs(0), 1);
        assert_eq!(retry_after_secs(u64::MAX), u64::MAX.div_ceil(NS_PER_SEC));
    }

    proptest::proptest! {
        // A client that waits what it is told is never early, and never
        // waits a whole second too long.
        #[test]
        fn retry_after_is_never_early(ns in 0u64..u64::MAX / 2) {
            let secs = retry_after_secs(ns);
            proptest::prop_assert!(secs >= 1);
            proptest::prop_assert!(u128::from(secs) * 1_000_000_000 >= u128::from(ns));
            proptest::prop_assert!(u128::from(secs - 1) * 1_000_000_000 < u128::from(ns.max(1)));
        }
    }

    #[test]
    fn lists_escape_and_carry_every_parameter() {
        let items = [
            PolicyItem {
                name: "a",
                quota: 1,
                window: 2,
                unit: None,
                partition: None,
            },
            PolicyItem {
                name: r#"b"\"#,
                quota: 3,
                window: 4,
                unit: Some("tokens"),
                partition: Some(b"\x00\xff"),
            },
        ];
        assert_eq!(
            policy_field(&items),
            r#""a";q=1;w=2, "b\"\\";q=3;w=4;qu="tokens";pk=:AP8=:"#
        );
        let limits = [LimitItem {
            name: "a",
            remaining: 5,
            reset: 6,
            partition: Some(b"k"),
        }];
        assert_eq!(limit_field(&limits), r#""a";r=5;t=6;pk=:aw==:"#);
        assert!(valid_name("per-key"));
        assert!(!valid_name("caf\u{e9}"));
        assert!(!valid_name(""));
        assert!(!valid_name("a\nb"));
    }
}
