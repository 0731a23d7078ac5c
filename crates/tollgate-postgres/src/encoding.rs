//! What a decision sends: the caller's key as stored, the policy as an id
//! and a flat array of its limits, and the operation's code.

use tollgate::{Algorithm, BackendError, Operation, Policy};
use tollgate_core::Limit;

use crate::numeric::Integer;

/// Longest caller key stored as is, in bytes; longer keys are hashed.
pub const MAX_KEY_BYTES: usize = 512;

/// Marks a hashed key; raw keys starting with it are hashed too, so no raw
/// key can name a hashed one's row.
const HASHED: char = '#';

/// The schema's `_apply` function's operation code and amount; a lease of a
/// policy with a sliding log is refused here, before reaching the database.
pub(crate) fn encode_operation(op: Operation, policy: &Policy) -> Result<(i16, u64), BackendError> {
    op.supported_by(policy)?;
    Ok(match op {
        Operation::Check(cost) => (0, cost),
        Operation::Refund(cost) => (1, cost),
        Operation::Force(cost) => (2, cost),
        Operation::Lease(max) => (3, max),
        // A reset deletes the row: no statement operation, no time.
        Operation::Reset => {
            return Err(BackendError::Config(format!(
                "{op:?} charges nothing and has no time: apply it with Backend::apply"
            )))
        }
    })
}

/// The algorithms of the one-statement charge (`sql/bucket_charge.sql`).
pub(crate) const BUCKETS: [Algorithm; 3] = [
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::LeakyBucket,
];

/// A check that the one-statement charge (`sql/bucket_charge.sql`) can
/// admit: a cost of `0 < cost <= burst` against a policy of one limit of
/// [`BUCKETS`]. Quota bounds (10^12, 2^62) are far below `u64::MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BucketCharge {
    /// The policy's one limit.
    pub limit: Limit,
    /// The cost, in units.
    pub cost: u64,
}

/// The policy's one limit when the one-statement charge can decide it.
pub(crate) fn bucket_limit(policy: &Policy) -> Option<Limit> {
    match policy.limits() {
        [limit] if BUCKETS.contains(&limit.algorithm) => Some(*limit),
        _ => None,
    }
}

/// The one-statement charge of `op` under `policy`, or `None` for every
/// other call, which `_apply_within` decides.
pub(crate) fn bucket_charge(op: Operation, policy: &Policy) -> Option<BucketCharge> {
    let (Operation::Check(cost), Some(limit)) = (op, bucket_limit(policy)) else {
        return None;
    };
    // A cost above the burst is never admitted: `_apply` says so.
    (cost > 0 && cost <= limit.quota.burst()).then_some(BucketCharge { limit, cost })
}

impl BucketCharge {
    /// The cost in ticks (1/limit ns of a period's units), as the statement
    /// takes it: below 10^12 * 2^62, within `u128`.
    pub fn cost_ticks(&self) -> u128 {
        u128::from(self.cost) * u128::from(self.limit.quota.period_ns())
    }

    /// What `_apply` returns for this charge, admitted, from the key's
    /// `[first, last]` state the statement wrote: `[1, cost, 1, remaining,
    /// 0, reset_after, 0]`, with the debt in ticks reduced from the state
    /// as `_bucket_family` does (tokens, TAT or level) and its whole units
    /// and drain time as `_bucket` gives them.
    pub fn answer(&self, state: &[Integer]) -> Result<[Integer; 7], BackendError> {
        let [first, last] = state else {
            return Err(BackendError::Store(format!(
                "expected a state of 2 numbers from the database, got {}",
                state.len()
            )));
        };
        let q = &self.limit.quota;
        let (l, p) = (i128::from(q.limit()), i128::from(q.period_ns()));
        let cap = i128::from(q.burst()) * p;
        // A TAT is below 2^63 ns times 10^12 ticks a ns: within i128, so
        // only a corrupt state overflows.
        let debt = match self.limit.algorithm {
            Algorithm::TokenBucket => cap.checked_sub(first.0),
            Algorithm::Gcra => last.0.checked_mul(l).and_then(|at| first.0.checked_sub(at)),
            _ => Some(first.0),
        }
        .filter(|debt| (1..=cap).contains(debt))
        .ok_or_else(|| {
            BackendError::Store(format!(
                "an admitted charge left the state [{}, {}], no debt of 1 to {cap} ticks",
                first.0, last.0
            ))
        })?;
        let (remaining, reset) = ((cap - debt) / p, (debt - 1) / l + 1);
        Ok([1, i128::from(self.cost), 1, remaining, 0, reset, 0].map(Integer))
    }
}

/// The key as stored: itself when it is 1 to [`MAX_KEY_BYTES`] bytes without
/// NUL (which `text` cannot hold) and not starting with `#`; otherwise `#`
/// and the SHA-1 of the key in hex.
pub fn stored_key(prefix: &str, key: &str) -> Result<String, BackendError> {
    if key.is_empty() {
        return Err(BackendError::InvalidKey("the key is empty".into()));
    }
    let raw = key.len() <= MAX_KEY_BYTES && !key.contains('\0') && !key.starts_with(HASHED);
    Ok(if raw {
        format!("{prefix}{key}")
    } else {
        let digest = sha1_smol::Sha1::from(key.as_bytes()).digest();
        format!("{prefix}{HASHED}{digest}")
    })
}

/// A policy as the database function takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedPolicy {
    /// Identifies the policy's row for a key: the first 8 bytes of the
    /// SHA-1 of its limits. Rows are per (key, policy), as the memory
    /// store keeps one limiter per policy.
    pub id: i64,
    /// `[algorithm, limit, period_ns, burst]` per limit, algorithms numbered
    /// from 1 in the order of [`Algorithm::ALL`].
    pub limits: Vec<i64>,
}

/// Encodes `policy`; every value of a valid quota fits a `bigint`.
pub fn encode(policy: &Policy) -> EncodedPolicy {
    let mut limits = Vec::with_capacity(4 * policy.limits().len());
    let mut text = String::new();
    for limit in policy.limits() {
        let code = Algorithm::ALL
            .iter()
            .position(|&a| a == limit.algorithm)
            .expect("every algorithm is in ALL") as i64
            + 1;
        let q = &limit.quota;
        // Quota bounds (10^12, 2^62) are far below i64::MAX.
        let (l, p, b) = (q.limit() as i64, q.period_ns() as i64, q.burst() as i64);
        limits.extend([code, l, p, b]);
        text.push_str(&format!("{}:{l}:{p}:{b};", limit.algorithm));
    }
    let digest = sha1_smol::Sha1::from(text.as_bytes()).digest().bytes();
    let id = i64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
    EncodedPolicy { id, limits }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::Quota;

    #[test]
    fn keys_are_kept_unless_awkward() {
        assert_eq!(stored_key("p:", "user-1").unwrap(), "p:user-1");
        let long = "x".repeat(MAX_KEY_BYTES + 1);
        for key in [long.as_str(), "a\0b", "#raw"] {
            let stored = stored_key("", key).unwrap();
            assert!(stored.starts_with('#') && stored.len() == 41, "{key:?}");
        }
        assert_ne!(
            stored_key("", "#raw").unwrap(),
            stored_key("", "raw").unwrap()
        );
        assert!(matches!(
            stored_key("p:", ""),
            Err(BackendError::InvalidKey(_))
        ));
    }

    #[test]
    fn an_admitted_bucket_charge_is_answered_from_the_state_written() {
        // 10 per second, burst 5: 1e9 ticks per unit, drained at 10 ticks a ns.
        let quota = Quota::with_parts(10, 1_000_000_000, 5).unwrap();
        let charge = |algorithm| {
            let policy = Policy::new(Limit::new(algorithm, quota));
            bucket_charge(Operation::Check(2), &policy).unwrap()
        };
        let ints = |v: [i128; 2]| v.map(Integer);
        // Each state holds a debt of 2.5 units, 250 ms to drain, at t = 7 ns.
        for (algorithm, state) in [
            (Algorithm::TokenBucket, [2_500_000_000, 7]),
            (Algorithm::Gcra, [2_500_000_070, 7]),
            (Algorithm::LeakyBucket, [2_500_000_000, 7]),
        ] {
            let answer = charge(algorithm).answer(&ints(state)).unwrap();
            assert_eq!(answer.map(|v| v.0), [1, 2, 1, 2, 0, 250_000_000, 0]);
        }
        // Not a state an admitted charge leaves: an error, never a panic.
        let gcra = charge(Algorithm::Gcra);
        for state in [
            vec![Integer(1)],
            vec![Integer(i128::MAX), Integer(i128::MAX)],
            ints([70, 7]).to_vec(),
            ints([5_000_000_071, 7]).to_vec(),
        ] {
            assert!(
                matches!(gcra.answer(&state), Err(BackendError::Store(_))),
                "{state:?}"
            );
        }
        assert_eq!(
            bucket_charge(
                Operation::Check(6),
                &Policy::new(Limit::new(Algorithm::Gcra, quota))
            ),
            None,
            "a cost above the burst goes to _apply_within"
        );
    }

    #[test]
    fn policies_differ_by_every_number_and_the_order() {
        let limit = |a, l, p, b| Limit::new(a, Quota::with_parts(l, p, b).unwrap());
        let g = limit(Algorithm::Gcra, 10, 1_000, 5);
        let w = limit(Algorithm::FixedWindow, 10, 1_000, 10);
        let one = encode(&Policy::new(g));
        assert_eq!(one.limits, [5, 10, 1_000, 5]);
        let ids: Vec<i64> = [
            Policy::new(g),
            Policy::new(w),
            Policy::new(limit(Algorithm::Gcra, 10, 1_000, 6)),
            Policy::with_limits(vec![g, w]).unwrap(),
            Policy::with_limits(vec![w, g]).unwrap(),
        ]
        .iter()
        .map(|p| encode(p).id)
        .collect();
        for (i, a) in ids.iter().enumerate() {
            assert!(!ids[i + 1..].contains(a), "{ids:?}");
        }
    }
}
