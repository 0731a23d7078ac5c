use tollgate_core::Limit;

/// One or more limits applied to the same key, atomically: a request is
/// charged on every limit or on none (for example 10/s and 1000/h).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Policy {
    limits: Vec<Limit>,
}

/// Why a [`Policy`] was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A policy needs at least one limit.
    #[error("a policy needs at least one limit")]
    Empty,
}

impl Policy {
    /// A policy of a single limit.
    pub fn new(limit: Limit) -> Self {
        Policy {
            limits: vec![limit],
        }
    }

    /// A policy of several limits, all applied atomically.
    pub fn with_limits(limits: Vec<Limit>) -> Result<Self, PolicyError> {
        if limits.is_empty() {
            return Err(PolicyError::Empty);
        }
        Ok(Policy { limits })
    }

    /// The limits, in the order given.
    pub fn limits(&self) -> &[Limit] {
        &self.limits
    }
}

impl From<Limit> for Policy {
    fn from(limit: Limit) -> Self {
        Policy::new(limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::{Algorithm, Quota};

    #[test]
    fn empty_policy_is_refused() {
        assert_eq!(Policy::with_limits(vec![]), Err(PolicyError::Empty));
        let limit = Limit::new(Algorithm::Gcra, Quota::per_second(10).unwrap());
        assert_eq!(Policy::from(limit).limits(), &[limit]);
    }
}
