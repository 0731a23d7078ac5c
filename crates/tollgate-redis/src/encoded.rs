//! A policy's part of every call, encoded once: the suffixes of its Redis
//! keys and the script's arguments for its limits, which depend on the
//! policy only. Encoding a limit means reducing its quota to the script's
//! units (`u128` greatest common divisors, see [`crate::exact`]) and writing
//! the numbers out: work a caller holding a policy need not repeat per call.

use tollgate::{BackendError, Policy};

use crate::exact::{self, Encoded};
use crate::keys::KeySpace;

/// A policy as every call of the script sends it ([`encode_policy`]); give
/// it to [`crate::RedisBackend::apply`] for each decision.
#[derive(Clone, Debug)]
pub struct EncodedPolicy {
    policy: Policy,
    /// What follows a key's stem in each of its Redis keys.
    suffixes: Vec<String>,
    /// The script's arguments after the operation: the number of limits,
    /// then `<algorithm> <cap> <x> <y> <max>` per limit.
    args: Vec<String>,
}

/// Encodes `policy` for the script once, or says which limit is outside the
/// range where the store decides exactly.
pub fn encode_policy(policy: &Policy) -> Result<EncodedPolicy, BackendError> {
    let mut args = Vec::with_capacity(1 + 5 * policy.limits().len());
    args.push(policy.limits().len().to_string());
    for limit in policy.limits() {
        let e = encode(limit)?;
        args.push(e.algorithm.to_string());
        args.extend([e.cap, e.x, e.y, e.max].map(|v| v.to_string()));
    }
    Ok(EncodedPolicy {
        policy: policy.clone(),
        suffixes: key_suffixes(policy),
        args,
    })
}

/// One limit's arguments, or why the store cannot be exact for it.
pub(crate) fn encode(limit: &tollgate_core::Limit) -> Result<Encoded, BackendError> {
    exact::encode(limit).map_err(|e| BackendError::UnsupportedPolicy(e.to_string()))
}

/// What follows a key's stem in each Redis key of `policy`, in the order
/// the script takes them.
pub(crate) fn key_suffixes(policy: &Policy) -> Vec<String> {
    let mut out = Vec::with_capacity(policy.limits().len() + 1);
    for limit in policy.limits() {
        KeySpace::push_suffixes(limit, &mut out);
    }
    out
}

/// The Redis keys of the key whose stem is `stem`, one per suffix: two
/// copies each, where `format!` would cost several times the instructions
/// on every call.
pub(crate) fn redis_keys(stem: &str, suffixes: &[String]) -> Vec<String> {
    suffixes.iter().map(|s| [stem, s].concat()).collect()
}

impl EncodedPolicy {
    /// The policy encoded.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The Redis keys of the key whose stem is `stem`.
    pub(crate) fn keys(&self, stem: &str) -> Vec<String> {
        redis_keys(stem, &self.suffixes)
    }

    /// The script's arguments after the operation (see the library).
    pub(crate) fn args(&self) -> &[String] {
        &self.args
    }
}
