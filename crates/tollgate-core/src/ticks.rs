//! Exact arithmetic on ticks (`1 / limit` ns): `u128` values stored as two
//! `u64` words so per-key state keeps 8-byte alignment, and divisions that
//! take the fast 64-bit path whenever the numerator allows.

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

#[inline]
fn div_floor(n: u128, d: u64) -> u128 {
    if n >> 64 == 0 {
        ((n as u64) / d) as u128
    } else {
        n / d as u128
    }
}

#[inline]
fn saturate(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

impl Quota {
    /// Whole cost units in `ticks` of capacity (rounded down).
    #[inline]
    pub(crate) fn units_floor(&self, ticks: u128) -> u64 {
        saturate(div_floor(ticks, self.period_ns()))
    }

    /// `ticks` as nanoseconds, rounded up so no wait is ever reported short.
    #[inline]
    pub(crate) fn ns_ceil(&self, ticks: u128) -> u64 {
        if ticks == 0 {
            return 0;
        }
        saturate(div_floor(ticks - 1, self.limit()) + 1)
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
