//! Descriptor values marked `secret: true` in the configuration (an API
//! key sent as a descriptor value): counted in the store as sent, and
//! shown everywhere else (`/v1/top`, `/top`, the `detailed_metric` series)
//! only as their digest, the 32 hex digits of
//! [`tollgate_http::digest`] (the HTTP layer's, for its hashed keys).

use std::borrow::Cow;

use tollgate_http::digest;

/// `entries` (a request's `(key, value)` pairs, level by level) with the
/// value at each level of `secret` replaced by its digest.
pub(crate) fn shown_entries<'e>(
    secret: &[usize],
    entries: &'e [(String, String)],
) -> Cow<'e, [(String, String)]> {
    if secret.is_empty() {
        return Cow::Borrowed(entries);
    }
    let shown = entries.iter().enumerate().map(|(level, (k, v))| {
        let v = if secret.contains(&level) {
            digest(v.as_bytes())
        } else {
            v.clone()
        };
        (k.clone(), v)
    });
    Cow::Owned(shown.collect())
}

/// A store key (`domain/key=value/...`, see
/// [`store_key`](crate::engine::store_key)) with the value at each level of
/// `secret` replaced by the digest of the value as sent.
pub(crate) fn shown_key<'k>(secret: &[usize], store_key: &'k str) -> Cow<'k, str> {
    if secret.is_empty() {
        return Cow::Borrowed(store_key);
    }
    let mut shown = String::with_capacity(store_key.len() + 32 * secret.len());
    for (i, segment) in store_key.split('/').enumerate() {
        if i > 0 {
            shown.push('/');
        }
        // Levels start after the domain; a `=` written in a key or value
        // is escaped, so the first one is the separator.
        match segment.split_once('=') {
            Some((key, value)) if secret.contains(&(i - 1)) => {
                shown.push_str(key);
                shown.push('=');
                shown.push_str(&digest(unescape(value).as_bytes()));
            }
            _ => shown.push_str(segment),
        }
    }
    Cow::Owned(shown)
}

/// The value as sent, from the store key's escaping of `/`, `=` and `%`.
fn unescape(value: &str) -> Cow<'_, str> {
    if !value.contains('%') {
        return Cow::Borrowed(value);
    }
    Cow::Owned(
        value
            .replace("%2F", "/")
            .replace("%3D", "=")
            .replace("%25", "%"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::store_key;

    fn pairs(entries: &[(&str, &str)]) -> Vec<(String, String)> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_the_secret_levels_are_hidden() {
        let entries = pairs(&[("plan", "free"), ("api_key", "sk-a/b=c%d")]);
        let key = store_key("api", &entries);
        let hidden = digest(b"sk-a/b=c%d");
        assert_eq!(
            shown_key(&[1], &key),
            format!("api/plan=free/api_key={hidden}")
        );
        assert_eq!(shown_key(&[], &key), key);
        let shown = shown_entries(&[1], &entries);
        assert_eq!(shown[0], ("plan".into(), "free".into()));
        assert_eq!(shown[1], ("api_key".into(), hidden));
    }

    #[test]
    fn an_escaped_percent_is_not_unescaped_twice() {
        let entries = pairs(&[("k", "%2F")]);
        let key = store_key("d", &entries);
        assert_eq!(shown_key(&[0], &key), format!("d/k={}", digest(b"%2F")));
    }
}
