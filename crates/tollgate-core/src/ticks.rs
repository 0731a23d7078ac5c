//! Exact arithmetic on ticks (`1 / limit` ns): `u128` values stored as two
//! `u64` words so per-key state keeps 8-byte alignment, and divisions that
//! take the fast 64-bit path whenever the numerator allows.

use std::num::NonZeroU64;

use crate::Quota;

/// A `u128` tick count stored in two 8-byte words.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ticks {
    lo: u64,
    hi: u64,
}

impl Ticks {
    #[inline]
    pub(crate) const fn new(v: u128) -> Self {
        Ticks {
            lo: v as u64,
            hi: (v >> 64) as u64,
        }
    }

    /// The value as a `u128`.
    #[inline]
    pub const fn get(self) -> u128 {
        ((self.hi as u128) << 64) | self.lo as u128
    }
}

/// `floor(n / d)` saturated to `u64::MAX`, with a 64-bit divide whenever `n`
/// fits, as it does for everyday quotas. (A precomputed reciprocal was tried
/// and measured slower: this CPU's divider is fast for small quotients, and
/// the divisions are off the path from one state to the next.)
#[inline]
fn div_saturating(n: u128, d: NonZeroU64) -> u64 {
    match u64::try_from(n) {
        Ok(n) => n / d,
        Err(_) => u64::try_from(n / d.get() as u128).unwrap_or(u64::MAX),
    }
}

impl Quota {
    /// Whole cost units in `ticks` of capacity (rounded down).
    #[inline]
    pub(crate) fn units_floor(&self, ticks: u128) -> u64 {
        // Less than one unit left is the usual state of a throttled key.
        if ticks < self.period_ns() as u128 {
            return 0;
        }
        div_saturating(ticks, self.period_nonzero())
    }

    /// The index of the aligned window holding `t`.
    #[inline]
    pub(crate) fn window(&self, t: u64) -> u64 {
        t / self.period_nonzero()
    }

    /// Nanoseconds from `t` to the end of its aligned window (`1..=period`).
    #[inline]
    pub(crate) fn until_window_end(&self, t: u64) -> u64 {
        self.period_ns() - t % self.period_nonzero()
    }

    /// `ticks` as nanoseconds, rounded up so no wait is ever reported short.
    #[inline]
    pub(crate) fn ns_ceil(&self, ticks: u128) -> u64 {
        if ticks == 0 {
            return 0;
        }
        div_saturating(ticks - 1, self.limit_nonzero()).saturating_add(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_round_trip() {
        for v in [0u128, 1, u64::MAX as u128, u64::MAX as u128 + 1, u128::MAX] {
            assert_eq!(Ticks::new(v).get(), v);
        }
    }

    #[test]
    fn division_saturates_only_beyond_u64() {
        let d = |v| NonZeroU64::new(v).unwrap();
        assert_eq!(div_saturating(u64::MAX as u128, d(1)), u64::MAX);
        assert_eq!(div_saturating(u64::MAX as u128 + 1, d(2)), 1 << 63);
        assert_eq!(div_saturating(u128::MAX, d(1)), u64::MAX);
        assert_eq!(div_saturating((u64::MAX as u128) << 3, d(8)), u64::MAX);
        assert_eq!(div_saturating(99, d(100)), 0);
    }

    #[test]
    fn rounding_directions() {
        let q = Quota::new(3, 10).unwrap();
        assert_eq!(q.ns_ceil(0), 0);
        assert_eq!(q.ns_ceil(1), 1);
        assert_eq!(q.ns_ceil(3), 1);
        assert_eq!(q.ns_ceil(4), 2);
        assert_eq!(q.units_floor(19), 1);
        assert_eq!(q.units_floor(20), 2);
        assert_eq!(q.ns_ceil(u128::MAX), u64::MAX);
        assert_eq!(q.units_floor((u64::MAX as u128) << 8), u64::MAX);
    }
}
