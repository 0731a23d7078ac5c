//! Exact arithmetic on ticks (`1 / limit` ns): `u128` values stored as two
//! `u64` words so per-key state keeps 8-byte alignment, and divisions by the
//! quota's period and limit through precomputed reciprocals.

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

/// Division by a fixed `d` in `1..=2^63` without a divide instruction when
/// the numerator fits in 64 bits, which it does for everyday quotas: the hot
/// path of a decision needs two such divisions, and a hardware 64-bit divide
/// costs as much as the rest of the decision.
///
/// With `m = ceil(2^127 / d)`, `floor(n / d) = floor(n * m / 2^127)` for every
/// `n < 2^64`: the error `m*d - 2^127` is below `d <= 2^63 = 2^127 / 2^64`
/// (Lemire, Kaser and Kurz, "Faster remainder by direct computation", 2019,
/// theorem 1). Exact, not an approximation.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Divisor {
    d: u64,
    /// `m` in two words, so a `Quota` keeps 8-byte alignment.
    m_lo: u64,
    m_hi: u64,
}

impl Divisor {
    /// Panics if `d` is 0 or above 2^63; `Quota` validates first.
    pub(crate) const fn new(d: u64) -> Self {
        assert!(d >= 1 && d <= 1 << 63, "divisor out of range");
        let m = ((1u128 << 127) - 1) / d as u128 + 1;
        Divisor {
            d,
            m_lo: m as u64,
            m_hi: (m >> 64) as u64,
        }
    }

    /// The divisor.
    #[inline]
    pub(crate) const fn get(self) -> u64 {
        self.d
    }

    /// `floor(n / d)` for a 64-bit `n`: two multiplications.
    #[inline]
    pub(crate) fn div_u64(self, n: u64) -> u64 {
        let n = n as u128;
        // (m * n) >> 64, without the 192-bit product: it stays below 2^127.
        let high = self.m_hi as u128 * n + ((self.m_lo as u128 * n) >> 64);
        (high >> 63) as u64
    }

    /// `floor(n / d)`, saturated to `u64::MAX`.
    #[inline]
    pub(crate) fn div_saturating(self, n: u128) -> u64 {
        match u64::try_from(n) {
            Ok(n) => self.div_u64(n),
            Err(_) => u64::try_from(n / self.d as u128).unwrap_or(u64::MAX),
        }
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
        self.period_divisor().div_saturating(ticks)
    }

    /// The index of the aligned window holding `t`.
    #[inline]
    pub(crate) fn window(&self, t: u64) -> u64 {
        self.period_divisor().div_u64(t)
    }

    /// Nanoseconds from `t` to the end of its aligned window (`1..=period`).
    #[inline]
    pub(crate) fn until_window_end(&self, t: u64) -> u64 {
        let period = self.period_ns();
        period - (t - self.window(t) * period)
    }

    /// `ticks` as nanoseconds, rounded up so no wait is ever reported short.
    #[inline]
    pub(crate) fn ns_ceil(&self, ticks: u128) -> u64 {
        if ticks == 0 {
            return 0;
        }
        self.limit_divisor()
            .div_saturating(ticks - 1)
            .saturating_add(1)
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

    fn check_divisor(d: u64, n: u128) {
        let want = u64::try_from(n / d as u128).unwrap_or(u64::MAX);
        assert_eq!(Divisor::new(d).div_saturating(n), want, "{n} / {d}");
    }

    #[test]
    fn divisor_edges() {
        let divisors = [
            1,
            2,
            3,
            7,
            10,
            100,
            999_999_937,
            60_000_000_000,
            (1 << 62) + 1,
            (1 << 63) - 1,
            1 << 63,
        ];
        let numerators = [
            0,
            1,
            2,
            99,
            100,
            101,
            u32::MAX as u128,
            u64::MAX as u128 - 1,
            u64::MAX as u128,
            u64::MAX as u128 + 1,
            u128::MAX,
        ];
        for d in divisors {
            for n in numerators {
                check_divisor(d, n);
            }
            for k in [1u128, 2, 3, 1_000, u64::MAX as u128 / d as u128] {
                for n in [k * d as u128 - 1, k * d as u128, k * d as u128 + 1] {
                    check_divisor(d, n);
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]

        #[test]
        fn divisor_is_exact(d in 1u64..=1 << 63, n: u64, small in 1u64..=1_000_000) {
            check_divisor(d, n as u128);
            check_divisor(small, n as u128);
            check_divisor(d, (n as u128) * (small as u128));
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
