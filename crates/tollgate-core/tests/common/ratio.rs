//! Exact non-negative rationals on `u128`, always in lowest terms, for the
//! reference models. Every operation is checked: an overflow panics (a bug
//! in the test's choice of range), it never wraps silently.

use std::cmp::Ordering;

/// `num / den`, `den > 0`, in lowest terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ratio {
    num: u128,
    den: u128,
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn mul(a: u128, b: u128) -> u128 {
    a.checked_mul(b).expect("reference model overflow")
}

impl Ratio {
    /// Zero.
    pub const ZERO: Ratio = Ratio { num: 0, den: 1 };

    /// `num / den` reduced.
    pub fn new(num: u128, den: u128) -> Self {
        assert!(den > 0, "zero denominator");
        let g = gcd(num, den);
        Ratio {
            num: num / g,
            den: den / g,
        }
    }

    /// A whole number.
    pub fn int(v: impl Into<u128>) -> Self {
        Ratio {
            num: v.into(),
            den: 1,
        }
    }

    /// `self + other`.
    pub fn add(self, other: Ratio) -> Ratio {
        let g = gcd(self.den, other.den);
        let (a, b) = (self.den / g, other.den / g);
        let num = mul(self.num, b)
            .checked_add(mul(other.num, a))
            .expect("reference model overflow");
        Ratio::new(num, mul(self.den, b))
    }

    /// `self - other`; panics if negative.
    pub fn sub(self, other: Ratio) -> Ratio {
        assert!(self >= other, "negative rational");
        let g = gcd(self.den, other.den);
        let (a, b) = (self.den / g, other.den / g);
        Ratio::new(mul(self.num, b) - mul(other.num, a), mul(self.den, b))
    }

    /// `max(self - other, 0)`.
    pub fn saturating_sub(self, other: Ratio) -> Ratio {
        if self <= other {
            Ratio::ZERO
        } else {
            self.sub(other)
        }
    }

    /// `self * other`, reducing crosswise first to stay small.
    pub fn mul(self, other: Ratio) -> Ratio {
        let g1 = gcd(self.num, other.den).max(1);
        let g2 = gcd(other.num, self.den).max(1);
        Ratio::new(
            mul(self.num / g1, other.num / g2),
            mul(self.den / g2, other.den / g1),
        )
    }

    /// `self / other`; `other` must not be zero.
    pub fn div(self, other: Ratio) -> Ratio {
        assert!(other.num > 0, "division by zero");
        self.mul(Ratio {
            num: other.den,
            den: other.num,
        })
    }

    /// Rounded down.
    pub fn floor(self) -> u128 {
        self.num / self.den
    }

    /// Rounded up.
    pub fn ceil(self) -> u128 {
        self.num.div_ceil(self.den)
    }
}

impl Ord for Ratio {
    /// Whole parts first, then the fractional parts crosswise (both below 1,
    /// so the products stay below `den * other.den`).
    fn cmp(&self, other: &Self) -> Ordering {
        self.floor().cmp(&other.floor()).then_with(|| {
            mul(self.num % self.den, other.den).cmp(&mul(other.num % other.den, self.den))
        })
    }
}

impl PartialOrd for Ratio {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
