//! Log timestamps to nanoseconds since the Unix epoch, by hand: the formats
//! are fixed, and a general date library would cost more than the rest of
//! the line's parsing.
//!
//! ```
//! use tollgate_whatif::time::{clf, iso8601, msec};
//!
//! let t = clf(b"10/Oct/2000:13:55:36 -0700").unwrap();
//! assert_eq!(t, 971_211_336_000_000_000);
//! assert_eq!(iso8601(b"2000-10-10T20:55:36Z"), Some(t));
//! assert_eq!(iso8601(b"2000-10-10T13:55:36.250-07:00"), Some(t + 250_000_000));
//! assert_eq!(msec(b"971211336.250"), Some(t + 250_000_000));
//! ```

const NS: i64 = 1_000_000_000;

use tollgate_http::learn::{civil_from_days, days_from_civil};

fn digits(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 18 {
        return None;
    }
    b.iter().try_fold(0i64, |acc, &c| {
        c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
    })
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// Nanoseconds since the epoch of a local date and time with an offset in
/// seconds east of UTC; `None` before 1970 or for an impossible date.
// The fields of a date and time, named as they are written.
#[allow(clippy::too_many_arguments)]
fn instant(
    y: i64,
    mo: i64,
    d: i64,
    h: i64,
    mi: i64,
    s: i64,
    frac_ns: i64,
    offset_s: i64,
) -> Option<u64> {
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s - offset_s;
    let ns = secs.checked_mul(NS)?.checked_add(frac_ns)?;
    u64::try_from(ns).ok()
}

fn month(b: &[u8]) -> Option<i64> {
    const NAMES: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    NAMES
        .iter()
        .position(|n| n.eq_ignore_ascii_case(b))
        .map(|i| i as i64 + 1)
}

/// `±hhmm` or `±hh:mm` to seconds east of UTC.
fn offset(b: &[u8]) -> Option<i64> {
    let (sign, rest) = match b.first()? {
        b'+' => (1, &b[1..]),
        b'-' => (-1, &b[1..]),
        _ => return None,
    };
    let (h, m) = match rest.len() {
        4 => (&rest[..2], &rest[2..]),
        5 if rest[2] == b':' => (&rest[..2], &rest[3..]),
        _ => return None,
    };
    let (h, m) = (digits(h)?, digits(m)?);
    (h < 24 && m < 60).then_some(sign * (h * 3600 + m * 60))
}

/// Common Log Format's `$time_local`: `10/Oct/2000:13:55:36 -0700`.
pub fn clf(b: &[u8]) -> Option<u64> {
    if b.len() != 26
        || b[2] != b'/'
        || b[6] != b'/'
        || b[11] != b':'
        || b[14] != b':'
        || b[17] != b':'
        || b[20] != b' '
    {
        return None;
    }
    instant(
        digits(&b[7..11])?,
        month(&b[3..6])?,
        digits(&b[0..2])?,
        digits(&b[12..14])?,
        digits(&b[15..17])?,
        digits(&b[18..20])?,
        0,
        offset(&b[21..])?,
    )
}

/// Fractional seconds `.123…` (up to nanoseconds; more digits are cut) and
/// the rest of the text after them.
fn fraction(b: &[u8]) -> Option<(i64, &[u8])> {
    let Some(rest) = b.strip_prefix(b".") else {
        return Some((0, b));
    };
    let n = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    if n == 0 {
        return None;
    }
    let kept = &rest[..n.min(9)];
    let scale = 10i64.pow(9 - kept.len() as u32);
    Some((digits(kept)? * scale, &rest[n..]))
}

/// ISO 8601 as nginx's `$time_iso8601` and Envoy's `START_TIME` write it:
/// `2000-10-10T13:55:36+00:00`, `…Z`, with or without fractional seconds.
pub fn iso8601(b: &[u8]) -> Option<u64> {
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (frac, zone) = fraction(&b[19..])?;
    let off = match zone {
        b"Z" | b"z" => 0,
        z => offset(z)?,
    };
    instant(
        digits(&b[0..4])?,
        digits(&b[5..7])?,
        digits(&b[8..10])?,
        digits(&b[11..13])?,
        digits(&b[14..16])?,
        digits(&b[17..19])?,
        frac,
        off,
    )
}

/// nginx's `$msec`: seconds since the epoch with a fraction, `1697040000.123`.
pub fn msec(b: &[u8]) -> Option<u64> {
    let n = b.iter().take_while(|c| c.is_ascii_digit()).count();
    let secs = digits(&b[..n])?;
    let (frac, rest) = fraction(&b[n..])?;
    if !rest.is_empty() {
        return None;
    }
    u64::try_from(secs.checked_mul(NS)?.checked_add(frac)?).ok()
}

/// `2000-10-10 20:55` (UTC) for nanoseconds since the epoch, to the minute:
/// how reports name minutes and hours.
pub fn utc_minute(ns: u64) -> String {
    let secs = (ns / NS as u64) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_and_leap_days() {
        assert_eq!(iso8601(b"1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            iso8601(b"2024-02-29T00:00:00Z"),
            Some(1_709_164_800 * NS as u64)
        );
        assert_eq!(iso8601(b"2023-02-29T00:00:00Z"), None);
        assert_eq!(iso8601(b"1969-12-31T23:59:59Z"), None);
        assert_eq!(clf(b"01/Jan/1970:01:00:00 +0100"), Some(0));
    }

    #[test]
    fn malformed_times_are_refused() {
        for bad in [
            &b""[..],
            b"10/Oct/2000:13:55:36",
            b"10/Okt/2000:13:55:36 -0700",
            b"10/Oct/2000:25:55:36 -0700",
            b"10/Oct/2000:13:55:36 -07000",
            b"aa/Oct/2000:13:55:36 -0700",
        ] {
            assert_eq!(clf(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(iso8601(b"2000-10-10T13:55:36"), None);
        assert_eq!(iso8601(b"2000-10-10T13:55:36.Z"), None);
        assert_eq!(msec(b"12.5x"), None);
        assert_eq!(msec(b""), None);
        assert_eq!(msec(b"99999999999999999999"), None);
    }

    #[test]
    fn minutes_in_words_round_trip() {
        for t in [
            "1970-01-01T00:00:00Z",
            "2000-02-29T23:59:00Z",
            "2024-12-31T05:07:00Z",
        ] {
            let ns = iso8601(t.as_bytes()).unwrap();
            assert_eq!(utc_minute(ns + 59_999_999_999), t[..16].replace('T', " "));
        }
    }

    #[test]
    fn fractions_keep_nanoseconds() {
        assert_eq!(
            iso8601(b"1970-01-01T00:00:01.123456789123Z"),
            Some(1_123_456_789)
        );
        assert_eq!(msec(b"1.5"), Some(1_500_000_000));
    }
}
