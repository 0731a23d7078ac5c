//! A domain's descriptor tree and envoyproxy/ratelimit's matching rules.

use std::collections::HashMap;
use std::sync::Arc;

use super::LimitEntry;

/// One level of a descriptor tree.
#[derive(Clone, Debug, Default)]
pub(crate) struct Node {
    /// `key` + `value`, matched exactly.
    pub exact: HashMap<(String, String), Node>,
    /// `key` + a `value` ending in `*`: the prefix before the `*`, in file
    /// order (the first that matches wins).
    pub wildcard: Vec<(String, String, Node)>,
    /// `key` alone: any value.
    pub any_value: HashMap<String, Node>,
    /// The limit of this node, if it has a `rate_limit`.
    pub limit: Option<Arc<LimitEntry>>,
}

impl Node {
    /// Adds `other`'s descriptors to this level; the first key (`key` or
    /// `key_value`) already here is the error.
    pub(super) fn merge(&mut self, other: Node) -> Result<(), String> {
        for ((key, value), node) in other.exact {
            if self.exact.contains_key(&(key.clone(), value.clone())) {
                return Err(format!("{key}_{value}"));
            }
            self.exact.insert((key, value), node);
        }
        for (key, prefix, node) in other.wildcard {
            if self
                .wildcard
                .iter()
                .any(|(k, p, _)| *k == key && *p == prefix)
            {
                return Err(format!("{key}_{prefix}*"));
            }
            self.wildcard.push((key, prefix, node));
        }
        for (key, node) in other.any_value {
            if self.any_value.contains_key(&key) {
                return Err(key);
            }
            self.any_value.insert(key, node);
        }
        Ok(())
    }

    /// The child matching one entry, by precedence: exact, wildcard, key.
    fn child(&self, key: &str, value: &str) -> Option<&Node> {
        // A tuple key needs owned strings; lookups are a few per request.
        if let Some(node) = self.exact.get(&(key.to_string(), value.to_string())) {
            return Some(node);
        }
        let wildcard = self
            .wildcard
            .iter()
            .find(|(k, prefix, _)| k == key && value.starts_with(prefix.as_str()));
        if let Some((_, _, node)) = wildcard {
            return Some(node);
        }
        self.any_value.get(key)
    }

    /// The limit of the node every entry leads to, if the path exists to
    /// the last entry and that node has one.
    pub fn lookup(&self, entries: &[(String, String)]) -> Option<&Arc<LimitEntry>> {
        let mut node = self;
        for (key, value) in entries {
            node = node.child(key, value)?;
        }
        if entries.is_empty() {
            return None;
        }
        node.limit.as_ref()
    }
}
