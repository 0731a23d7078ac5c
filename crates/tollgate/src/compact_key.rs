//! String keys kept inside the limiter's table: [`CompactKey`], and [`KeyStr`] to
//! look them up by a borrowed `&str` without allocating.
//!
//! A `Limiter<String>` keeps each key's bytes in their own heap allocation,
//! so a lookup in a large table makes one more dependent cache miss than a
//! `u64` key: the slot, then the bytes its `String` points to. At a million
//! keys that second miss is most of the time a check takes. A [`CompactKey`] of up
//! to [`CompactKey::INLINE`] bytes (user ids, IPv4 addresses, short API keys)
//! holds them in its own 24 bytes, the size of a `String`, so it sits in
//! the slot and a new key allocates nothing; a longer one is boxed, as a
//! `String` would be.
//!
//! ```
//! use tollgate::{CompactKey, KeyStr, Limiter};
//!
//! let limiter: Limiter<CompactKey> = Limiter::per_minute(100)?;
//! let decision = limiter.check(KeyStr::new("user-42")); // no allocation
//! assert!(decision.allowed);
//! assert_eq!(limiter.peek(KeyStr::new("user-42")).remaining, 99);
//! # Ok::<(), tollgate::QuotaError>(())
//! ```

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// Bytes a [`CompactKey`] holds without allocating.
const INLINE: usize = 22;

/// An owned string key that keeps up to [`CompactKey::INLINE`] bytes inline: the
/// key type for strings in a [`Limiter`](crate::Limiter), looked up by
/// [`KeyStr`]. It hashes, compares and orders as its `str` does.
// Refusals compare bit copies of stored keys without the lock
// (`crate::owned_keys`): nothing reachable through `&CompactKey` may ever
// write to the key or what it owns.
#[derive(Clone)]
pub struct CompactKey(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<str>),
}

// The point of the type: a key costs a slot no more than a `String` does.
const _: () = assert!(std::mem::size_of::<CompactKey>() == 24);

impl CompactKey {
    /// The longest key, in bytes, held without allocating.
    pub const INLINE: usize = INLINE;

    /// The key `text`, inline if it fits.
    pub fn new(text: &str) -> CompactKey {
        if text.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..text.len()].copy_from_slice(text.as_bytes());
            CompactKey(Repr::Inline {
                len: text.len() as u8,
                bytes,
            })
        } else {
            CompactKey(Repr::Heap(text.into()))
        }
    }

    /// The key's text.
    #[inline]
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline { len, bytes } => {
                // SAFETY: the bytes up to `len` were copied from a `str`
                // whole (`CompactKey::new`), so they are UTF-8.
                unsafe { std::str::from_utf8_unchecked(bytes.get_unchecked(..usize::from(*len))) }
            }
            Repr::Heap(text) => text,
        }
    }

    /// Whether the key's bytes are inline (no allocation).
    pub fn is_inline(&self) -> bool {
        matches!(self.0, Repr::Inline { .. })
    }

    /// The key borrowed, as lookups take it.
    #[inline]
    pub fn as_key_str(&self) -> &KeyStr {
        KeyStr::new(self.as_str())
    }
}

/// A borrowed string key: what a [`Limiter<CompactKey>`](crate::Limiter) is
/// looked up by, as a `Limiter<String>` is by `&str`. Making one is free
/// ([`KeyStr::new`]); the limiter copies it into a [`CompactKey`] only when it
/// stores a new key.
#[derive(PartialOrd, Ord)]
#[repr(transparent)]
pub struct KeyStr(str);

// Equal and hashed as its text. Compared by hand: a lookup compares the key
// it looks for with the one it finds on every check, and short keys (user
// ids, addresses) take a few word loads instead of a call to `memcmp`
// (1 key, one thread: 26 instructions a check in `memcmp` alone).
impl PartialEq for KeyStr {
    #[inline]
    fn eq(&self, other: &KeyStr) -> bool {
        let (a, b) = (self.0.as_bytes(), other.0.as_bytes());
        a.len() == b.len() && same_bytes(a, b)
    }
}

impl Eq for KeyStr {}

impl Hash for KeyStr {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

/// Whether `a` and `b`, of one length, hold the same bytes. Up to 16
/// bytes, by two loads from each end that overlap when shorter than both
/// together, so every byte is compared with no loop.
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n > 16 {
        return a == b;
    }
    if n >= 8 {
        let word = |s: &[u8], at: usize| u64::from_ne_bytes(s[at..at + 8].try_into().unwrap());
        return (word(a, 0) ^ word(b, 0)) | (word(a, n - 8) ^ word(b, n - 8)) == 0;
    }
    if n >= 4 {
        let word = |s: &[u8], at: usize| u32::from_ne_bytes(s[at..at + 4].try_into().unwrap());
        return (word(a, 0) ^ word(b, 0)) | (word(a, n - 4) ^ word(b, n - 4)) == 0;
    }
    // 0 to 3 bytes: the first, middle and last cover them all.
    n == 0 || (a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1])
}

impl KeyStr {
    /// `text` as a key to look up.
    #[inline]
    pub fn new(text: &str) -> &KeyStr {
        // SAFETY: `KeyStr` is `repr(transparent)` over `str`, so the two
        // references have the same layout and metadata.
        unsafe { &*(std::ptr::from_ref(text) as *const KeyStr) }
    }

    /// The key's text.
    #[inline]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl ToOwned for KeyStr {
    type Owned = CompactKey;

    fn to_owned(&self) -> CompactKey {
        CompactKey::new(&self.0)
    }
}

impl Borrow<KeyStr> for CompactKey {
    #[inline]
    fn borrow(&self) -> &KeyStr {
        self.as_key_str()
    }
}

impl Borrow<str> for CompactKey {
    #[inline]
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl Deref for CompactKey {
    type Target = str;

    #[inline]
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for CompactKey {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

// Hashed and compared as the `str`, as `Borrow` requires: a `CompactKey` and the
// `KeyStr` or `str` it borrows as find the same slot.
impl Hash for CompactKey {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialEq for CompactKey {
    #[inline]
    fn eq(&self, other: &CompactKey) -> bool {
        self.as_key_str() == other.as_key_str()
    }
}

impl Eq for CompactKey {}

impl PartialOrd for CompactKey {
    fn partial_cmp(&self, other: &CompactKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for CompactKey {
    fn cmp(&self, other: &CompactKey) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialEq<str> for CompactKey {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for CompactKey {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl From<&str> for CompactKey {
    fn from(text: &str) -> CompactKey {
        CompactKey::new(text)
    }
}

impl From<String> for CompactKey {
    /// Inline if it fits; otherwise the `String`'s own allocation is kept.
    fn from(text: String) -> CompactKey {
        if text.len() <= INLINE {
            CompactKey::new(&text)
        } else {
            CompactKey(Repr::Heap(text.into_boxed_str()))
        }
    }
}

impl From<CompactKey> for String {
    fn from(key: CompactKey) -> String {
        match key.0 {
            Repr::Heap(text) => text.into_string(),
            Repr::Inline { .. } => key.as_str().to_owned(),
        }
    }
}

impl fmt::Debug for CompactKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for CompactKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for KeyStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for KeyStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::{Algorithm, FakeClock, Limit, Limiter, Quota};

    #[test]
    fn inline_up_to_the_limit_boxed_beyond() {
        let at = "k".repeat(CompactKey::INLINE);
        let past = "k".repeat(CompactKey::INLINE + 1);
        assert!(CompactKey::new("").is_inline());
        assert!(CompactKey::new(&at).is_inline());
        assert!(!CompactKey::new(&past).is_inline());
        assert_eq!(CompactKey::new(&at), at.as_str());
        assert_eq!(CompactKey::new(&past), past.as_str());
        // A multi-byte character straddling the limit stays whole.
        let straddling = format!("{}é", "k".repeat(CompactKey::INLINE - 1));
        assert_eq!(CompactKey::new(&straddling).as_str(), straddling);
        assert!(!CompactKey::new(&straddling).is_inline());
    }

    proptest! {
        #[test]
        fn a_key_is_its_text_whatever_its_length(text in "\\PC{0,40}") {
            let key = CompactKey::new(&text);
            prop_assert_eq!(key.as_str(), text.as_str());
            prop_assert_eq!(key.is_inline(), text.len() <= CompactKey::INLINE);
            prop_assert_eq!(CompactKey::from(text.clone()), key.clone());
            prop_assert_eq!(String::from(key.clone()), text.clone());
            prop_assert_eq!(KeyStr::new(&text).to_owned(), key);
        }

        /// `Borrow`'s contract: the owned key and what it borrows as hash
        /// and compare alike, so a lookup by either finds it.
        #[test]
        fn a_key_hashes_and_compares_as_its_text(a in "\\PC{0,30}", b in "\\PC{0,30}") {
            let hasher = foldhash::fast::RandomState::default();
            let (ka, kb) = (CompactKey::new(&a), CompactKey::new(&b));
            prop_assert_eq!(hasher.hash_one(&ka), hasher.hash_one(a.as_str()));
            prop_assert_eq!(hasher.hash_one(&ka), hasher.hash_one(KeyStr::new(&a)));
            prop_assert_eq!(ka == kb, a == b);
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            prop_assert_eq!(KeyStr::new(&a).cmp(KeyStr::new(&b)), a.cmp(&b));
        }

        /// Keys of one length that differ in any one byte, or not at all,
        /// compare as their text (the word loads of `same_bytes`).
        #[test]
        fn keys_of_one_length_compare_as_their_text(
            a in prop::collection::vec(b'a'..=b'c', 0..24),
            flip in any::<prop::sample::Index>(),
            differ in any::<bool>(),
        ) {
            let mut b = a.clone();
            if differ && !b.is_empty() {
                let at = flip.index(b.len());
                b[at] = if b[at] == b'a' { b'b' } else { b'a' };
            }
            let (a, b) = (String::from_utf8(a).unwrap(), String::from_utf8(b).unwrap());
            prop_assert_eq!(KeyStr::new(&a) == KeyStr::new(&b), a == b);
            prop_assert_eq!(CompactKey::new(&a) == CompactKey::new(&b), a == b);
        }

        /// A `Limiter<CompactKey>` decides as a `Limiter<String>` does, keys short
        /// and long, through table growth, resets and the sweep.
        #[test]
        fn a_limiter_of_keys_decides_as_one_of_strings(
            steps in prop::collection::vec((0usize..64, 0u64..3, 0u64..400_000_000, any::<bool>()), 1..300),
        ) {
            let names: Vec<String> = (0..64)
                .map(|i| if i % 2 == 0 { format!("u{i}") } else { format!("{i}-{}", "long".repeat(8)) })
                .collect();
            let clock = FakeClock::new();
            let limit = Limit::new(Algorithm::Gcra, Quota::new(3, 1_000_000_000).unwrap());
            let keys: Limiter<CompactKey, _> =
                Limiter::builder(limit).clock(clock.clone()).idle_grace(Duration::ZERO).build();
            let strings: Limiter<String, _> =
                Limiter::builder(limit).clock(clock.clone()).idle_grace(Duration::ZERO).build();
            for (name, cost, gap, reset) in steps {
                clock.advance(Duration::from_nanos(gap));
                let name = &names[name];
                if reset {
                    prop_assert_eq!(keys.reset(KeyStr::new(name)), strings.reset(name.as_str()));
                } else {
                    prop_assert_eq!(keys.check_cost(KeyStr::new(name), cost), strings.check_cost(name.as_str(), cost));
                }
                if gap % 7 == 0 {
                    prop_assert_eq!(keys.sweep(), strings.sweep());
                }
                prop_assert_eq!(keys.len(), strings.len());
            }
        }
    }
}
