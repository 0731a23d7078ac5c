//! A domain's descriptor tree and envoyproxy/ratelimit's matching rules.
//!
//! A node's children are found by envoyproxy/ratelimit's own composite
//! key: `key_value` for a descriptor with a value, `key` alone without, so
//! two descriptors that compose the same key are the same node, and a `*`
//! matches by prefix on that composite key (only as the last character: a
//! `*` anywhere else is a plain character, as there).

use std::collections::HashMap;
use std::sync::Arc;

use super::LimitEntry;

/// One level of a descriptor tree.
#[derive(Clone, Debug, Default)]
pub(crate) struct Node {
    /// Children by composite key (`key_value`, or `key` for any value).
    pub children: HashMap<String, Node>,
    /// Composite keys ending in `*`, in file order: the first whose prefix
    /// matches wins.
    pub wildcards: Vec<String>,
    /// The limit of this node, if it has a `rate_limit`.
    pub limit: Option<Arc<LimitEntry>>,
    /// `share_threshold`: the values this `*` node matches share a counter.
    pub share_threshold: bool,
}

/// The limit a request descriptor matched, and how its counter is named.
#[derive(Clone, Debug)]
pub struct Match<'c> {
    /// The configured limit.
    pub entry: &'c Arc<LimitEntry>,
    /// The entries as the store key names them: the request's, except
    /// that an entry matched by a `share_threshold` wildcard carries the
    /// configured pattern (`files*`), so all its values share one counter.
    pub counter_entries: Vec<(String, String)>,
}

/// The composite key of a descriptor, as envoyproxy/ratelimit builds it.
pub(crate) fn composite(key: &str, value: Option<&str>) -> String {
    match value {
        Some(value) if !value.is_empty() => format!("{key}_{value}"),
        _ => key.to_string(),
    }
}

impl Node {
    /// Adds `other`'s descriptors to this level; the first composite key
    /// (`key` or `key_value`) already here is the error.
    pub(super) fn merge(&mut self, other: Node) -> Result<(), String> {
        if let Some(taken) = other
            .children
            .keys()
            .find(|k| self.children.contains_key(*k))
        {
            return Err(taken.clone());
        }
        self.wildcards.extend(other.wildcards);
        self.children.extend(other.children);
        Ok(())
    }

    /// The child matching one entry, by precedence: the exact composite
    /// key, then the first wildcard by prefix, then the key alone. With it,
    /// the pattern to count under when a `share_threshold` wildcard matched.
    fn child(&self, key: &str, value: &str) -> Option<(&Node, Option<String>)> {
        let joined = format!("{key}_{value}");
        if let Some(node) = self.children.get(&joined) {
            return Some((node, None));
        }
        for wildcard in &self.wildcards {
            let prefix = &wildcard[..wildcard.len() - 1];
            if joined.starts_with(prefix) {
                let node = self.children.get(wildcard)?;
                let shared = node.share_threshold.then(|| {
                    let pattern = wildcard.strip_prefix(&format!("{key}_"));
                    pattern.unwrap_or(wildcard).to_string()
                });
                return Some((node, shared));
            }
        }
        self.children.get(key).map(|node| (node, None))
    }

    /// The limit of the node every entry leads to, if the path exists to
    /// the last entry and that node has one.
    pub fn lookup(&self, entries: &[(String, String)]) -> Option<Match<'_>> {
        let mut node = self;
        let mut counter_entries = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            let (next, shared) = node.child(key, value)?;
            counter_entries.push((key.clone(), shared.unwrap_or_else(|| value.clone())));
            node = next;
        }
        let entry = node.limit.as_ref()?;
        Some(Match {
            entry,
            counter_entries,
        })
    }
}
