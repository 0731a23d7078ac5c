//! `RateLimit-Policy` values made once: the field names the rules a
//! response shows with their quotas and windows, which do not change from
//! one request to the next, so a layer keeps one value for each set of
//! rules it has shown and hands out copies (a reference count, no
//! formatting or allocation per response).

use std::sync::OnceLock;

use http::HeaderValue;

/// The values of one layer, by set of rules shown (bit `i` for rule `i`).
pub(crate) struct PolicyValues {
    by_set: Box<[OnceLock<HeaderValue>]>,
}

impl PolicyValues {
    /// Sets are kept for the first this many rules (64 sets); a response
    /// showing a later rule gets its value made afresh.
    pub(crate) const MAX_RULES: usize = 6;

    /// Room for every set of a layer's `rules`.
    pub(crate) fn new(rules: usize) -> Self {
        let sets = 1 << rules.min(Self::MAX_RULES);
        PolicyValues {
            by_set: (0..sets).map(|_| OnceLock::new()).collect(),
        }
    }

    /// The value for `set`, made by `make` the first time it is asked for.
    pub(crate) fn get(
        &self,
        set: u64,
        make: impl FnOnce() -> Option<HeaderValue>,
    ) -> Option<HeaderValue> {
        let Some(cell) = usize::try_from(set).ok().and_then(|i| self.by_set.get(i)) else {
            return make();
        };
        if let Some(value) = cell.get() {
            return Some(value.clone());
        }
        let value = make()?;
        Some(cell.get_or_init(|| value).clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_once_per_set() {
        let values = PolicyValues::new(2);
        let made = std::cell::Cell::new(0);
        let make = |text: &'static str| {
            made.set(made.get() + 1);
            Some(HeaderValue::from_static(text))
        };
        assert_eq!(values.get(0b01, || make("a")).unwrap(), "a");
        assert_eq!(values.get(0b01, || make("other")).unwrap(), "a");
        assert_eq!(values.get(0b11, || make("a, b")).unwrap(), "a, b");
        assert_eq!(made.get(), 2);
        // Beyond the sets kept: made every time.
        assert_eq!(values.get(0b100, || make("c")).unwrap(), "c");
        assert_eq!(values.get(0b100, || make("c")).unwrap(), "c");
        assert_eq!(made.get(), 4);
    }
}
