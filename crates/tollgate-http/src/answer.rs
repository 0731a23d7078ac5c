//! What a refused client gets: status, fields and an RFC 9457
//! `application/problem+json` body (replaceable).
//!
//! | why | status | `Retry-After` | `RateLimit` fields |
//! |---|---|---|---|
//! | an enforcing rule denied | 429 | yes, seconds rounded up, at least 1 | yes |
//! | the cost can never fit | 413 (configurable) | no: waiting will not help | yes |
//! | the store failed, rule fails closed | 503 | yes (configurable, 1 s by default) | no |
//! | the key is missing, too long or has bad bytes | 400 | no | no |
//! | the cost header is missing or not a number | 400 (411 without `Content-Length`) | no | no |

use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, StatusCode};

use crate::{scratch, CostError, KeyError};

/// Why the layer answered instead of the service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// A rule's budget is spent; the request fits again after this many
    /// seconds.
    Limited {
        /// `Retry-After`, seconds.
        retry_after: u64,
    },
    /// The request costs more than the rule can ever admit.
    TooLarge {
        /// The request's cost.
        cost: u64,
    },
    /// The rule's store failed and the rule fails closed.
    StoreUnavailable {
        /// `Retry-After`, seconds.
        retry_after: u64,
    },
    /// No usable key.
    BadKey(KeyError),
    /// No usable cost.
    BadCost(CostError),
}

/// A refusal: the rule that refused, why, and the status it is answered with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The status of the answer.
    pub status: StatusCode,
    /// The rule's name.
    pub rule: Arc<str>,
    /// Why.
    pub reason: Reason,
}

impl Refusal {
    /// A one-line explanation for the client, naming no key or secret.
    pub fn detail(&self) -> String {
        Detail(self).to_string()
    }

    /// The `Retry-After` to send, if any.
    pub fn retry_after(&self) -> Option<u64> {
        match self.reason {
            Reason::Limited { retry_after } | Reason::StoreUnavailable { retry_after } => {
                Some(retry_after)
            }
            _ => None,
        }
    }
}

/// [`Refusal::detail`], written wherever it goes (into the body, with no
/// string of its own).
struct Detail<'a>(&'a Refusal);

impl fmt::Display for Detail<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_detail(self.0, |piece| f.write_str(piece))
    }
}

/// The `detail` text of `refusal`, handed to `put` piece by piece: its one
/// wording, for [`Detail`]'s `Display` and for the body, which writes the
/// pieces without `core::fmt` (its machinery cost about 450 instructions a
/// refusal: docs/PERFORMANCE.md, "Session 13").
fn write_detail<E>(refusal: &Refusal, mut put: impl FnMut(&str) -> Result<(), E>) -> Result<(), E> {
    let rule: &str = &refusal.rule;
    let mut digits = itoa::Buffer::new();
    // Only a bad key's or cost's message is formatted (a rare answer).
    let message;
    let pieces: &[&str] = match &refusal.reason {
        Reason::Limited { retry_after } | Reason::StoreUnavailable { retry_after } => {
            let what = if matches!(refusal.reason, Reason::Limited { .. }) {
                "` exceeded; retry in "
            } else {
                "` cannot be checked right now; retry in "
            };
            &[
                "rate limit `",
                rule,
                what,
                digits.format(*retry_after),
                " s",
            ]
        }
        Reason::TooLarge { cost } => &[
            "a request costing ",
            digits.format(*cost),
            " can never fit rate limit `",
            rule,
            "`",
        ],
        Reason::BadKey(e) => {
            message = e.to_string();
            &["rate limit `", rule, "`: ", &message]
        }
        Reason::BadCost(e) => {
            message = e.to_string();
            &["rate limit `", rule, "`: ", &message]
        }
    };
    pieces.iter().try_for_each(|piece| put(piece))
}

impl serde::Serialize for Detail<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Writes a refusal's body: its `Content-Type` and bytes.
pub type BodyWriter = Arc<dyn Fn(&Refusal) -> (HeaderValue, Bytes) + Send + Sync>;

/// The default body: `application/problem+json` (RFC 9457) with `type`,
/// `title`, `status`, `detail`, and the extension members `rule` and, when
/// there is one, `retry_after`.
pub fn problem_json(refusal: &Refusal) -> (HeaderValue, Bytes) {
    // Written in this thread's buffer, kept in its block.
    let body = scratch::bytes(|body| {
        write_problem(body, refusal);
        scratch::shared(body)
    });
    (HeaderValue::from_static("application/problem+json"), body)
}

/// RFC 9457 problem details as compact JSON, member by member: what a
/// serializer would write, without escaping strings that need none (every
/// one the layer writes, unless a rule's name has a quote or a backslash).
fn write_problem(out: &mut Vec<u8>, refusal: &Refusal) {
    let mut digits = itoa::Buffer::new();
    // A status's reason phrase never needs escaping (a test checks them all).
    out.extend_from_slice(br#"{"type":"about:blank","title":""#);
    out.extend_from_slice(title(refusal.status).as_bytes());
    out.extend_from_slice(br#"","status":"#);
    out.extend_from_slice(digits.format(refusal.status.as_u16()).as_bytes());
    out.extend_from_slice(br#","detail":"#);
    // The detail is fixed text, numbers and the rule's name, except for a
    // bad key's or cost's message: only then is it checked once written.
    let plain_rule = !refusal.rule.bytes().any(needs_escape);
    let fixed = !matches!(refusal.reason, Reason::BadKey(_) | Reason::BadCost(_));
    let start = out.len();
    out.push(b'"');
    let written: Result<(), Infallible> = write_detail(refusal, |piece| {
        out.extend_from_slice(piece.as_bytes());
        Ok(())
    });
    let Ok(()) = written;
    if !(plain_rule && fixed) && out[start + 1..].iter().copied().any(needs_escape) {
        out.truncate(start);
        let _ = serde_json::to_writer(&mut *out, &Detail(refusal));
    } else {
        out.push(b'"');
    }
    out.extend_from_slice(br#","rule":"#);
    if plain_rule {
        out.push(b'"');
        out.extend_from_slice(refusal.rule.as_bytes());
        out.push(b'"');
    } else {
        let _ = serde_json::to_writer(&mut *out, &*refusal.rule);
    }
    if let Some(secs) = refusal.retry_after() {
        out.extend_from_slice(br#","retry_after":"#);
        out.extend_from_slice(digits.format(secs).as_bytes());
    }
    out.push(b'}');
}

/// The problem's `title`: the status's reason phrase.
fn title(status: StatusCode) -> &'static str {
    status.canonical_reason().unwrap_or("Error")
}

/// Whether a JSON string must escape `byte` (RFC 8259: controls, the quote
/// and the backslash).
fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_details() {
        let refusal = Refusal {
            status: StatusCode::TOO_MANY_REQUESTS,
            rule: "per-key".into(),
            reason: Reason::Limited { retry_after: 1 },
        };
        let (ct, body) = problem_json(&refusal);
        assert_eq!(ct, "application/problem+json");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["status"], 429);
        assert_eq!(v["title"], "Too Many Requests");
        assert_eq!(v["rule"], "per-key");
        assert_eq!(v["retry_after"], 1);
        let too_large = Refusal {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            rule: "r".into(),
            reason: Reason::TooLarge { cost: 9 },
        };
        assert_eq!(too_large.retry_after(), None);
        assert!(too_large.detail().contains("never fit"));
    }

    /// What `write_problem` must write: serde_json's own serialization of
    /// the same members.
    #[derive(serde::Serialize)]
    struct Problem<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        title: &'static str,
        status: u16,
        detail: String,
        rule: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        retry_after: Option<u64>,
    }

    #[test]
    fn no_title_needs_escaping() {
        for code in 100..1000 {
            let title = title(StatusCode::from_u16(code).unwrap());
            assert!(!title.bytes().any(needs_escape), "{code}: {title}");
        }
    }

    proptest::proptest! {
        #[test]
        fn the_body_is_what_serde_json_writes(
            rule in "[ -~]{1,12}",
            status in proptest::sample::select(vec![400u16, 411, 413, 429, 503, 599]),
            reason in 0..4u8,
            n in proptest::prelude::any::<u64>(),
            missing in "[ -~\\n\\t]{0,12}",
        ) {
            let reason = match reason {
                0 => Reason::Limited { retry_after: n },
                1 => Reason::TooLarge { cost: n },
                2 => Reason::StoreUnavailable { retry_after: n },
                _ => Reason::BadKey(KeyError::Missing(missing)),
            };
            let refusal = Refusal {
                status: StatusCode::from_u16(status).unwrap(),
                rule: rule.as_str().into(),
                reason,
            };
            let expected = serde_json::to_vec(&Problem {
                kind: "about:blank",
                title: title(refusal.status),
                status,
                detail: refusal.detail(),
                rule: &rule,
                retry_after: refusal.retry_after(),
            })
            .unwrap();
            let (_, body) = problem_json(&refusal);
            proptest::prop_assert_eq!(std::str::from_utf8(&body).unwrap(), std::str::from_utf8(&expected).unwrap());
        }
    }
}
