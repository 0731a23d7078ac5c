//! PostgreSQL `numeric` on the wire, for integers only: the core's values
//! (`u64` costs, durations saturated at 2^64 - 1, -1 for "never", costs in
//! ticks up to 2^102) exceed `bigint`, and `numeric` keeps them exact.
//!
//! The binary format is `ndigits, weight, sign, dscale` (16 bits each), then
//! `ndigits` base-10,000 digits, most significant first; the value is
//! `sum(digit[i] * 10000^(weight - i))`.

use std::error::Error;

use bytes::{BufMut, BytesMut};
use tokio_postgres::types::{to_sql_checked, FromSql, IsNull, ToSql, Type};

const NBASE: u128 = 10_000;
const POSITIVE: u16 = 0x0000;
const NEGATIVE: u16 = 0x4000;

/// An unsigned integer sent as a `numeric` parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Numeric(pub u128);

impl ToSql for Numeric {
    fn to_sql(&self, _: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        // u128::MAX has 39 decimal digits: 10 of base 10,000.
        let mut digits = Vec::with_capacity(10);
        let mut v = self.0;
        while v > 0 {
            digits.push((v % NBASE) as i16);
            v /= NBASE;
        }
        let weight = digits.len() as i16 - 1;
        // Trailing zero digits are implied by the weight.
        let skip = digits.iter().take_while(|&&d| d == 0).count();
        let digits = &digits[skip..];
        out.put_i16(digits.len() as i16);
        out.put_i16(weight.max(0));
        out.put_u16(POSITIVE);
        out.put_u16(0);
        for d in digits.iter().rev() {
            out.put_i16(*d);
        }
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }

    to_sql_checked!();
}

/// An integral `numeric` read from a result, as an `i128`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Integer(pub i128);

impl<'a> FromSql<'a> for Integer {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
        let word = |i: usize| -> Result<u16, Box<dyn Error + Sync + Send>> {
            raw.get(2 * i..2 * i + 2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]))
                .ok_or_else(|| "truncated numeric".into())
        };
        let ndigits = word(0)? as usize;
        let weight = word(1)? as i16 as i32;
        let sign = word(2)?;
        let mut value: i128 = 0;
        for i in 0..ndigits {
            let digit = word(4 + i)? as i128;
            if weight - (i as i32) < 0 {
                if digit != 0 {
                    return Err("numeric with a fraction where an integer was expected".into());
                }
                continue;
            }
            value = value
                .checked_mul(NBASE as i128)
                .and_then(|v| v.checked_add(digit))
                .ok_or("numeric too large")?;
        }
        // Digits implied by the weight beyond the last one given.
        for _ in (ndigits as i32)..=weight {
            value = value
                .checked_mul(NBASE as i128)
                .ok_or("numeric too large")?;
        }
        match sign {
            POSITIVE => Ok(Integer(value)),
            NEGATIVE => Ok(Integer(-value)),
            _ => Err("numeric NaN or infinity where an integer was expected".into()),
        }
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(v: u128) -> i128 {
        let mut buf = BytesMut::new();
        Numeric(v).to_sql(&Type::NUMERIC, &mut buf).unwrap();
        Integer::from_sql(&Type::NUMERIC, &buf).unwrap().0
    }

    #[test]
    fn integers_survive_the_wire() {
        let ticks = u128::from(u64::MAX) << 40;
        for v in [
            0,
            1,
            9_999,
            10_000,
            10_001,
            100_000_000,
            1 << 53,
            1 << 64,
            ticks,
        ] {
            assert_eq!(round_trip(v), v as i128);
        }
        assert_eq!(round_trip(u64::MAX.into()), u64::MAX as i128);
    }

    #[test]
    fn negatives_and_trailing_zero_digits_decode() {
        // -1: one digit, weight 0, negative; 2 * 10^8 as a single digit of
        // weight 2; 7.0000 as digits [7, 0] with a fraction of zeros.
        let raw = |words: &[u16]| {
            words
                .iter()
                .flat_map(|w| w.to_be_bytes())
                .collect::<Vec<u8>>()
        };
        let decode = |words: &[u16]| Integer::from_sql(&Type::NUMERIC, &raw(words));
        assert_eq!(decode(&[1, 0, NEGATIVE, 0, 1]).unwrap().0, -1);
        assert_eq!(decode(&[1, 2, POSITIVE, 0, 2]).unwrap().0, 200_000_000);
        assert_eq!(decode(&[2, 0, POSITIVE, 4, 7, 0]).unwrap().0, 7);
        assert!(decode(&[2, 0, POSITIVE, 4, 7, 5]).is_err(), "a fraction");
        assert!(decode(&[0, 0, 0xC000, 0]).is_err(), "NaN");
        assert!(decode(&[1, 0]).is_err(), "truncated");
    }
}
