//! Redis key names: `<prefix>{<key>}:<algorithm>:<limit>:<period_ns>:<burst>`.
//!
//! The caller's key is the hash tag, so every key of one decision (all the
//! limits of a policy, the two keys of a sliding log) lands in one Redis
//! Cluster slot and one script can touch them atomically. The quota is part
//! of the name, so changing a policy starts fresh state instead of reading
//! state written under another quota.

use tollgate::BackendError;
use tollgate_core::{Algorithm, Limit};

/// Longest caller key used as is, in bytes; longer keys are hashed.
pub const MAX_KEY_BYTES: usize = 128;

/// Marks a hashed key; raw keys starting with it are hashed too, so no raw
/// key can name a hashed one's state.
const HASHED: char = '#';

/// Builds the Redis keys of a decision under a fixed prefix.
#[derive(Clone, Debug)]
pub struct KeySpace {
    prefix: String,
}

impl KeySpace {
    /// A key space under `prefix`, which must not contain `{` or `}` (they
    /// would move the hash tag off the caller's key).
    pub fn new(prefix: impl Into<String>) -> Result<Self, BackendError> {
        let prefix = prefix.into();
        if prefix.contains(['{', '}']) {
            return Err(BackendError::InvalidKey(format!(
                "the key prefix `{prefix}` must not contain `{{` or `}}`"
            )));
        }
        Ok(KeySpace { prefix })
    }

    /// The hash-tagged stem `<prefix>{<tag>}` shared by every key of `key`.
    ///
    /// The tag is the key itself when it is 1 to [`MAX_KEY_BYTES`] bytes of
    /// UTF-8 without braces and not starting with `#`; otherwise `#` and the
    /// SHA-1 of the key's bytes in hex (a brace would end the tag early, an
    /// empty tag would let Redis Cluster spread the keys over slots, and
    /// other bytes are any caller's: a trace's keys need not be text).
    pub fn stem(&self, key: &[u8]) -> Result<String, BackendError> {
        if key.is_empty() {
            return Err(BackendError::InvalidKey("the key is empty".into()));
        }
        let raw = std::str::from_utf8(key).ok().filter(|k| {
            k.len() <= MAX_KEY_BYTES && !k.contains(['{', '}']) && !k.starts_with(HASHED)
        });
        // Built by hand: on every call, and `format!` costs several times
        // more instructions than the copies.
        let tagged = |tag: &str| {
            let mut stem = String::with_capacity(self.prefix.len() + tag.len() + 2);
            stem.push_str(&self.prefix);
            stem.push('{');
            stem.push_str(tag);
            stem.push('}');
            stem
        };
        Ok(match raw {
            Some(key) => tagged(key),
            None => tagged(&format!("{HASHED}{}", sha1_smol::Sha1::from(key).digest())),
        })
    }

    /// Appends the suffixes (after a key's stem) of the Redis keys of
    /// `limit`: one, or two for the sliding log (its one sorted set, and the
    /// time of its last refund). The log's names differ from the three keys
    /// of the two-set log of `tollgate_v3` (`:t`, `:c`, `:l`), which clients
    /// of that version may still write during a rolling upgrade.
    pub fn push_suffixes(limit: &Limit, out: &mut Vec<String>) {
        let q = &limit.quota;
        let name = format!(
            ":{}:{}:{}:{}",
            limit.algorithm,
            q.limit(),
            q.period_ns(),
            q.burst()
        );
        if limit.algorithm == Algorithm::SlidingLog {
            out.push(format!("{name}:log"));
            out.push(format!("{name}:refund"));
        } else {
            out.push(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::Quota;

    fn tag(stem: &str) -> &str {
        let open = stem.find('{').unwrap();
        let close = open + stem[open..].find('}').unwrap();
        &stem[open + 1..close]
    }

    #[test]
    fn the_caller_key_is_the_hash_tag() {
        let ks = KeySpace::new("app:").unwrap();
        assert_eq!(ks.stem(b"user-1").unwrap(), "app:{user-1}");
        let mut suffixes = vec![];
        let per_sec = Quota::per_second(10).unwrap();
        KeySpace::push_suffixes(&Limit::new(Algorithm::Gcra, per_sec), &mut suffixes);
        KeySpace::push_suffixes(&Limit::new(Algorithm::SlidingLog, per_sec), &mut suffixes);
        let keys: Vec<String> = suffixes.iter().map(|s| format!("app:{{u}}{s}")).collect();
        assert_eq!(
            keys,
            [
                "app:{u}:gcra:10:1000000000:10",
                "app:{u}:sliding_log:10:1000000000:10:log",
                "app:{u}:sliding_log:10:1000000000:10:refund"
            ]
        );
    }

    #[test]
    fn awkward_keys_are_hashed_into_a_non_empty_tag() {
        let ks = KeySpace::new("p:").unwrap();
        let long = "x".repeat(MAX_KEY_BYTES + 1);
        let at_cap = "y".repeat(MAX_KEY_BYTES);
        assert_eq!(tag(&ks.stem(at_cap.as_bytes()).unwrap()), at_cap);
        let keys: [&[u8]; 7] = [
            long.as_bytes(),
            b"}",
            b"a}b",
            b"{a}",
            b"#raw",
            b"\xff\xfe",
            b"a\x80",
        ];
        for key in keys {
            let stem = ks.stem(key).unwrap();
            let t = tag(&stem);
            assert!(t.starts_with('#') && t.len() == 41, "{key:?} -> {stem}");
        }
        // Distinct keys, distinct tags; a raw `#...` key never names a hash.
        let hashed = ks.stem(long.as_bytes()).unwrap();
        let forged = format!("#{}", tag(&hashed).trim_start_matches('#'));
        assert_ne!(ks.stem(forged.as_bytes()).unwrap(), hashed);
    }

    #[test]
    fn bad_prefixes_and_empty_keys_are_refused() {
        assert!(matches!(
            KeySpace::new("a{"),
            Err(BackendError::InvalidKey(_))
        ));
        let ks = KeySpace::new("").unwrap();
        assert!(matches!(ks.stem(b""), Err(BackendError::InvalidKey(_))));
    }
}
