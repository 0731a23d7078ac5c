/// When a denied request could be admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RetryAfter {
    /// The request was admitted.
    Now,
    /// The same request, with no other traffic for the key, is admitted after
    /// exactly this many nanoseconds and not one nanosecond sooner.
    After(u64),
    /// The cost can never fit (larger than the quota's capacity).
    Never,
}

impl RetryAfter {
    /// Nanoseconds to wait: `Some(0)` for `Now`, `None` for `Never`.
    pub const fn as_nanos(self) -> Option<u64> {
        match self {
            RetryAfter::Now => Some(0),
            RetryAfter::After(ns) => Some(ns),
            RetryAfter::Never => None,
        }
    }
}

/// The outcome of one request, with the numbers a client needs (`docs/SEMANTICS.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Whether the request was admitted (and charged).
    pub allowed: bool,
    /// The most cost the rule can ever admit at one instant: `limit` for the
    /// windows, `burst` for the buckets, `burst + 1` for the queue.
    pub limit: u64,
    /// The largest cost that would be admitted at the same instant, after
    /// this decision was applied.
    pub remaining: u64,
    /// `Now` when admitted; otherwise when the same request would be.
    pub retry_after: RetryAfter,
    /// Nanoseconds until the key, left alone, is back to its initial state.
    pub reset_after: u64,
    /// For an admitted `leaky_queue` request: nanoseconds from arrival until
    /// release, rounded up. 0 otherwise.
    pub delay: u64,
}

impl Decision {
    /// Merges the decisions of several rules on one request into the one a
    /// client should see: admitted only if every rule admits; the smallest
    /// `remaining` (and that rule's `limit`); the longest `retry_after`,
    /// `reset_after` and `delay`.
    pub fn most_restrictive(self, other: Decision) -> Decision {
        let (tight, _) = if other.remaining < self.remaining {
            (other, self)
        } else {
            (self, other)
        };
        Decision {
            allowed: self.allowed && other.allowed,
            limit: tight.limit,
            remaining: tight.remaining,
            retry_after: self.retry_after.max(other.retry_after),
            reset_after: self.reset_after.max(other.reset_after),
            delay: self.delay.max(other.delay),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_orders_never_last() {
        assert!(RetryAfter::Now < RetryAfter::After(0));
        assert!(RetryAfter::After(u64::MAX) < RetryAfter::Never);
        assert_eq!(RetryAfter::After(7).as_nanos(), Some(7));
        assert_eq!(RetryAfter::Never.as_nanos(), None);
    }

    #[test]
    fn most_restrictive_takes_the_worst_of_each() {
        let a = Decision {
            allowed: true,
            limit: 10,
            remaining: 4,
            retry_after: RetryAfter::Now,
            reset_after: 50,
            delay: 0,
        };
        let b = Decision {
            allowed: false,
            limit: 1000,
            remaining: 0,
            retry_after: RetryAfter::After(9),
            reset_after: 20,
            delay: 3,
        };
        let m = a.most_restrictive(b);
        assert_eq!(m, b.most_restrictive(a));
        assert!(!m.allowed);
        assert_eq!((m.limit, m.remaining), (1000, 0));
        assert_eq!(m.retry_after, RetryAfter::After(9));
        assert_eq!((m.reset_after, m.delay), (50, 3));
    }
}
