//! Durations on the command line: an integer with a unit, in nanoseconds.
//!
//! Exact integers only (no fractions, no floating point), so that a period
//! such as `999999937ns` reaches the core unchanged.

use std::fmt;

/// The accepted units and their length in nanoseconds. Two-letter units come
/// first so that `ms` is not read as `m` followed by junk.
const UNITS: [(&str, u64); 7] = [
    ("ns", 1),
    ("us", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60 * 1_000_000_000),
    ("h", 3_600 * 1_000_000_000),
    ("d", 86_400 * 1_000_000_000),
];

/// Why a duration was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DurationError {
    /// Nothing was given.
    Empty,
    /// No digits before the unit (e.g. `s` or `-5s`).
    NoNumber(String),
    /// Digits without a unit (e.g. `60`).
    MissingUnit(String),
    /// A unit that is not one of `ns us ms s m h d`.
    UnknownUnit(String),
    /// More nanoseconds than a `u64` holds.
    Overflow(String),
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HINT: &str = "expected an integer with a unit ns, us, ms, s, m, h or d, e.g. 60s";
        match self {
            DurationError::Empty => write!(f, "empty duration; {HINT}"),
            DurationError::NoNumber(s) => write!(f, "`{s}` does not start with a number; {HINT}"),
            DurationError::MissingUnit(s) => write!(f, "`{s}` has no unit; {HINT}"),
            DurationError::UnknownUnit(s) => write!(f, "`{s}` has an unknown unit; {HINT}"),
            DurationError::Overflow(s) => write!(
                f,
                "`{s}` is too long: at most {}ns (about 584 years)",
                u64::MAX
            ),
        }
    }
}

impl std::error::Error for DurationError {}

/// Parses `<integer><unit>` into nanoseconds, e.g. `1m` → 60 000 000 000.
///
/// Usable directly as a clap `value_parser`. Zero is accepted here; whoever
/// needs a positive duration (a [`tollgate_core::Quota`]) refuses it.
pub fn parse_duration(text: &str) -> Result<u64, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    if number.is_empty() {
        return Err(DurationError::NoNumber(text.to_string()));
    }
    if unit.is_empty() {
        return Err(DurationError::MissingUnit(text.to_string()));
    }
    let scale = UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|&(_, ns)| ns)
        .ok_or_else(|| DurationError::UnknownUnit(text.to_string()))?;
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| DurationError::Overflow(text.to_string()))
}

/// Writes `ns` in the largest unit that divides it exactly, the inverse of
/// [`parse_duration`]: `50000000` → `50ms`, `90000000000` → `90s`.
pub fn format_duration(ns: u64) -> String {
    let (unit, scale) = UNITS
        .iter()
        .rev()
        .find(|&&(_, scale)| ns % scale == 0)
        .copied()
        .unwrap_or(UNITS[0]);
    format!("{}{unit}", ns / scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting_picks_the_largest_exact_unit_and_parses_back() {
        let cases = [
            (0, "0d"),
            (1, "1ns"),
            (50_000_000, "50ms"),
            (1_500_000_000, "1500ms"),
            (90_000_000_000, "90s"),
            (120_000_000_000, "2m"),
            (86_400_000_000_000, "1d"),
            (u64::MAX, "18446744073709551615ns"),
        ];
        for (ns, text) in cases {
            assert_eq!(format_duration(ns), text);
            assert_eq!(parse_duration(text), Ok(ns));
        }
    }

    #[test]
    fn every_unit_scales_exactly() {
        let cases = [
            ("999999937ns", 999_999_937),
            ("7us", 7_000),
            ("250ms", 250_000_000),
            ("60s", 60_000_000_000),
            ("1m", 60_000_000_000),
            ("2h", 7_200_000_000_000),
            ("366d", 366 * 86_400 * 1_000_000_000),
            ("0s", 0),
            ("007ms", 7_000_000),
        ];
        for (text, ns) in cases {
            assert_eq!(parse_duration(text), Ok(ns), "{text}");
        }
    }

    #[test]
    fn the_largest_value_fits_and_one_more_overflows() {
        assert_eq!(parse_duration("18446744073709551615ns"), Ok(u64::MAX));
        for text in [
            "18446744073709551616ns",
            "18446744073709552s",
            "99999999999999999999999d",
        ] {
            assert_eq!(
                parse_duration(text),
                Err(DurationError::Overflow(text.into()))
            );
        }
    }

    #[test]
    fn malformed_text_is_named_in_the_error() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert_eq!(
            parse_duration("60"),
            Err(DurationError::MissingUnit("60".into()))
        );
        for text in ["s", "-5s", " 5s", "+5s", "1.5s"] {
            let err = parse_duration(text).unwrap_err();
            assert!(
                matches!(
                    err,
                    DurationError::NoNumber(_) | DurationError::UnknownUnit(_)
                ),
                "{text}: {err:?}"
            );
        }
        for text in ["5sec", "5 s", "5S", "5µs", "5s ", "5ms5"] {
            assert_eq!(
                parse_duration(text),
                Err(DurationError::UnknownUnit(text.into()))
            );
        }
        let msg = parse_duration("60").unwrap_err().to_string();
        assert!(
            msg.contains("`60` has no unit") && msg.contains("ns, us"),
            "{msg}"
        );
    }
}
