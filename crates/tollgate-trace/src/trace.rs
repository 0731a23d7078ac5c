//! The replay engine: streams a CSV trace of requests through one rule and
//! writes one decision line per request (`docs/SEMANTICS.md`, "Trace format").
//!
//! Input is read line by line into one reused buffer and output goes through
//! the caller's writer, so memory is bounded by the longest line plus the
//! per-key states. Keys are kept as raw bytes: they are echoed unchanged and
//! never need to be valid UTF-8.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufRead, Read, Write};

use tollgate_core::{Decision, Limit, RetryAfter, State};

use crate::escape::escape_controls;

/// The header every trace starts with.
pub const INPUT_HEADER: &str = "t_ns,key,cost";
/// The header of the decisions written for a trace.
pub const OUTPUT_HEADER: &str = "t_ns,key,cost,allowed,remaining,retry_after_ns,delay_ns";
/// The longest accepted line, in bytes, without its line ending: a bound on
/// the buffer, so a file without newlines cannot exhaust memory.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// How many decisions a replay made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Requests read (lines after the header).
    pub requests: u64,
    /// Requests admitted.
    pub admitted: u64,
    /// Distinct keys seen.
    pub keys: usize,
}

/// Why a replay stopped.
#[derive(Debug)]
pub enum ReplayError {
    /// Reading the trace failed.
    Read(io::Error),
    /// Writing the decisions failed.
    Write(io::Error),
    /// The input had no header line at all.
    EmptyInput,
    /// A line of the trace is malformed; `line` counts from 1, the header
    /// being line 1.
    Line {
        /// 1-based line number in the input.
        line: u64,
        /// What is wrong with it.
        problem: LineProblem,
    },
    /// The decider of [`replay_with`] failed on a line (e.g. a store error).
    Decide {
        /// 1-based line number in the input.
        line: u64,
        /// What went wrong.
        message: String,
    },
}

/// What is wrong with one line of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LineProblem {
    /// The first line is not exactly [`INPUT_HEADER`].
    BadHeader(String),
    /// A request line with nothing on it.
    EmptyLine,
    /// Longer than [`MAX_LINE_BYTES`].
    TooLong,
    /// Not three comma-separated fields.
    FieldCount(usize),
    /// The key field is empty.
    EmptyKey,
    /// `t_ns` or `cost` starts with `-`.
    Negative {
        /// `t_ns` or `cost`.
        field: &'static str,
        /// The text found (shortened).
        text: String,
    },
    /// `t_ns` or `cost` is not made of decimal digits.
    NotAnInteger {
        /// `t_ns` or `cost`.
        field: &'static str,
        /// The text found (shortened).
        text: String,
    },
    /// `t_ns` or `cost` is above `u64::MAX`.
    OutOfRange {
        /// `t_ns` or `cost`.
        field: &'static str,
        /// The text found (shortened).
        text: String,
    },
}

impl fmt::Display for LineProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LineProblem::BadHeader(found) => {
                write!(f, "bad header `{found}`, expected `{INPUT_HEADER}`")
            }
            LineProblem::EmptyLine => f.write_str("empty line"),
            LineProblem::TooLong => write!(f, "longer than {MAX_LINE_BYTES} bytes"),
            LineProblem::FieldCount(n) => {
                let what = if *n < 3 {
                    "missing field"
                } else {
                    "extra field"
                };
                write!(f, "{what}: expected 3 fields t_ns,key,cost, found {n}")
            }
            LineProblem::EmptyKey => f.write_str("empty key"),
            LineProblem::Negative { field, text } => write!(f, "{field} `{text}` is negative"),
            LineProblem::NotAnInteger { field, text } => {
                write!(f, "{field} `{text}` is not a non-negative integer")
            }
            LineProblem::OutOfRange { field, text } => {
                write!(f, "{field} `{text}` is above {}", u64::MAX)
            }
        }
    }
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The io::Error is the source, printed by whoever walks the chain.
            ReplayError::Read(_) => f.write_str("reading the trace"),
            ReplayError::Write(_) => f.write_str("writing the decisions"),
            ReplayError::EmptyInput => {
                write!(f, "empty input: expected the header `{INPUT_HEADER}`")
            }
            ReplayError::Line { line, problem } => write!(f, "line {line}: {problem}"),
            ReplayError::Decide { line, message } => write!(f, "line {line}: {message}"),
        }
    }
}

impl std::error::Error for ReplayError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReplayError::Read(e) | ReplayError::Write(e) => Some(e),
            _ => None,
        }
    }
}

/// Replays the trace read from `input` through `rule`, one state per key,
/// writing the decisions to `output` (flushed before returning).
///
/// Stops at the first malformed line; what was written before it is the
/// caller's to discard.
pub fn replay<R: BufRead, W: Write>(
    rule: Limit,
    input: R,
    output: W,
) -> Result<Summary, ReplayError> {
    // foldhash rather than SipHash, which cost up to a third of the replay's
    // throughput (docs/PERFORMANCE.md); it is still seeded per process.
    let mut keys: HashMap<Box<[u8]>, State, foldhash::fast::RandomState> = HashMap::default();
    let mut summary = replay_with(input, output, |key, t_ns, cost| {
        let state = match keys.get_mut(key) {
            Some(state) => state,
            None => keys
                .entry(key.into())
                .or_insert_with(|| State::new(rule.algorithm, &rule.quota)),
        };
        Ok(state.decide(&rule.quota, t_ns, cost))
    })?;
    summary.keys = keys.len();
    Ok(summary)
}

/// Replays the trace with decisions from `decide(key, t_ns, cost)`, for
/// deciders other than in-process states (a store such as Redis); the same
/// validation and output as [`replay`]. An `Err` from `decide` stops the run
/// as [`ReplayError::Decide`] with the line number. `Summary::keys` is left 0.
pub fn replay_with<R: BufRead, W: Write>(
    mut input: R,
    mut output: W,
    mut decide: impl FnMut(&[u8], u64, u64) -> Result<Decision, String>,
) -> Result<Summary, ReplayError> {
    let mut line = Vec::with_capacity(256);
    let mut summary = Summary::default();

    if !read_line(&mut input, &mut line, 1)? {
        return Err(ReplayError::EmptyInput);
    }
    if line != INPUT_HEADER.as_bytes() {
        return Err(ReplayError::Line {
            line: 1,
            problem: LineProblem::BadHeader(shorten(&line)),
        });
    }
    output
        .write_all(OUTPUT_HEADER.as_bytes())
        .and_then(|()| output.write_all(b"\n"))
        .map_err(ReplayError::Write)?;

    let mut number = 1;
    loop {
        number += 1;
        if !read_line(&mut input, &mut line, number)? {
            break;
        }
        let request = parse_request(&line).map_err(|problem| ReplayError::Line {
            line: number,
            problem,
        })?;
        let decision = decide(request.key, request.t_ns, request.cost).map_err(|message| {
            ReplayError::Decide {
                line: number,
                message,
            }
        })?;
        summary.requests += 1;
        summary.admitted += u64::from(decision.allowed);
        write_decision(&mut output, &line, &decision).map_err(ReplayError::Write)?;
    }
    output.flush().map_err(ReplayError::Write)?;
    Ok(summary)
}

/// Reads the next line into `buf` without its `\n` or `\r\n`; `false` at the
/// end of the input.
fn read_line<R: BufRead>(
    input: &mut R,
    buf: &mut Vec<u8>,
    number: u64,
) -> Result<bool, ReplayError> {
    buf.clear();
    // Reading a little past the limit (room for one more byte and a `\r\n`)
    // tells a line that is too long from one exactly at the limit, without
    // ever buffering more than that.
    let n = Read::take(&mut *input, (MAX_LINE_BYTES + 3) as u64)
        .read_until(b'\n', buf)
        .map_err(ReplayError::Read)?;
    if n == 0 {
        return Ok(false);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
    }
    if buf.len() > MAX_LINE_BYTES {
        return Err(ReplayError::Line {
            line: number,
            problem: LineProblem::TooLong,
        });
    }
    Ok(true)
}

/// One request of a trace, borrowing its key from the line.
#[derive(Debug, PartialEq, Eq)]
pub struct Request<'a> {
    /// Its time, in nanoseconds.
    pub t_ns: u64,
    /// Whose budget it spends, as written.
    pub key: &'a [u8],
    /// What it costs.
    pub cost: u64,
}

/// Splits and checks one request line (without its line ending): the
/// parser of [`replay`], for other readers of the format.
pub fn parse_request(line: &[u8]) -> Result<Request<'_>, LineProblem> {
    if line.is_empty() {
        return Err(LineProblem::EmptyLine);
    }
    let mut fields = line.split(|&b| b == b',');
    let (Some(t_ns), Some(key), Some(cost), None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        let count = line.iter().filter(|&&b| b == b',').count() + 1;
        return Err(LineProblem::FieldCount(count));
    };
    let t_ns = parse_u64("t_ns", t_ns)?;
    if key.is_empty() {
        return Err(LineProblem::EmptyKey);
    }
    let cost = parse_u64("cost", cost)?;
    Ok(Request { t_ns, key, cost })
}

/// A plain non-negative decimal integer: digits only, no sign or spaces.
#[inline]
fn parse_u64(field: &'static str, text: &[u8]) -> Result<u64, LineProblem> {
    if text.is_empty() {
        return Err(integer_problem(field, text));
    }
    let mut value: u64 = 0;
    for &b in text {
        let digit = b.wrapping_sub(b'0');
        value = match value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(digit)))
        {
            Some(v) if digit <= 9 => v,
            _ => return Err(integer_problem(field, text)),
        };
    }
    Ok(value)
}

/// Says why `text`, refused by [`parse_u64`], is not a `u64`.
#[cold]
fn integer_problem(field: &'static str, text: &[u8]) -> LineProblem {
    let digits = |t: &[u8]| !t.is_empty() && t.iter().all(u8::is_ascii_digit);
    let shown = shorten(text);
    if digits(text) {
        LineProblem::OutOfRange { field, text: shown }
    } else if text.first() == Some(&b'-') && digits(&text[1..]) {
        LineProblem::Negative { field, text: shown }
    } else {
        LineProblem::NotAnInteger { field, text: shown }
    }
}

/// Field text for an error message: lossy UTF-8, cut to a readable length,
/// control characters escaped.
pub fn shorten(text: &[u8]) -> String {
    shorten_to(text, 40)
}

/// [`shorten`] to at most `shown` characters (and an ellipsis).
pub fn shorten_to(text: &[u8], shown: usize) -> String {
    let text = String::from_utf8_lossy(text);
    let text = match text.char_indices().nth(shown) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.into_owned(),
    };
    escape_controls(&text).into_owned()
}

/// Writes the request line as read, then the decision's columns.
fn write_decision<W: Write>(
    out: &mut W,
    request_line: &[u8],
    decision: &tollgate_core::Decision,
) -> io::Result<()> {
    let mut numbers = itoa::Buffer::new();
    out.write_all(request_line)?;
    out.write_all(if decision.allowed { b",1," } else { b",0," })?;
    out.write_all(numbers.format(decision.remaining).as_bytes())?;
    out.write_all(b",")?;
    match decision.retry_after {
        RetryAfter::Now => out.write_all(b"0")?,
        RetryAfter::After(ns) => out.write_all(numbers.format(ns).as_bytes())?,
        RetryAfter::Never => out.write_all(b"-1")?,
    }
    out.write_all(b",")?;
    out.write_all(numbers.format(decision.delay).as_bytes())?;
    out.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::{Algorithm, Quota};

    fn problem(line: &str) -> LineProblem {
        parse_request(line.as_bytes()).unwrap_err()
    }

    #[test]
    fn a_request_line_splits_into_three_fields() {
        assert_eq!(
            parse_request(b"0059500000000,user 7,3"),
            Ok(Request {
                t_ns: 59_500_000_000,
                key: b"user 7",
                cost: 3
            })
        );
        let max = format!("{},\"q\",0", u64::MAX);
        assert_eq!(
            parse_request(max.as_bytes()),
            Ok(Request {
                t_ns: u64::MAX,
                key: b"\"q\"",
                cost: 0
            })
        );
    }

    #[test]
    fn each_malformed_field_is_named() {
        assert_eq!(problem(""), LineProblem::EmptyLine);
        assert_eq!(problem("1,a"), LineProblem::FieldCount(2));
        assert_eq!(problem("1"), LineProblem::FieldCount(1));
        assert_eq!(problem("1,a,1,"), LineProblem::FieldCount(4));
        assert_eq!(problem("1,,1"), LineProblem::EmptyKey);
        let cases = [
            (
                "-1,a,1",
                LineProblem::Negative {
                    field: "t_ns",
                    text: "-1".into(),
                },
            ),
            (
                "1,a,-0",
                LineProblem::Negative {
                    field: "cost",
                    text: "-0".into(),
                },
            ),
            (
                "x,a,1",
                LineProblem::NotAnInteger {
                    field: "t_ns",
                    text: "x".into(),
                },
            ),
            (
                ",a,1",
                LineProblem::NotAnInteger {
                    field: "t_ns",
                    text: "".into(),
                },
            ),
            (
                "1,a,",
                LineProblem::NotAnInteger {
                    field: "cost",
                    text: "".into(),
                },
            ),
            (
                "1,a, 1",
                LineProblem::NotAnInteger {
                    field: "cost",
                    text: " 1".into(),
                },
            ),
            (
                "1,a,+1",
                LineProblem::NotAnInteger {
                    field: "cost",
                    text: "+1".into(),
                },
            ),
            (
                "1,a,1.0",
                LineProblem::NotAnInteger {
                    field: "cost",
                    text: "1.0".into(),
                },
            ),
            (
                "1,a,-",
                LineProblem::NotAnInteger {
                    field: "cost",
                    text: "-".into(),
                },
            ),
            (
                "18446744073709551616,a,1",
                LineProblem::OutOfRange {
                    field: "t_ns",
                    text: "18446744073709551616".into(),
                },
            ),
            (
                "1,a,99999999999999999999x",
                LineProblem::NotAnInteger {
                    field: "cost",
                    text: "99999999999999999999x".into(),
                },
            ),
        ];
        for (line, want) in cases {
            assert_eq!(problem(line), want, "{line}");
        }
    }

    #[test]
    fn long_fields_are_shortened_in_messages() {
        let line = format!("{},a,1", "9".repeat(100));
        let LineProblem::OutOfRange { text, .. } = problem(&line) else {
            panic!("{line}")
        };
        assert_eq!(text, format!("{}…", "9".repeat(40)));
    }

    fn lines(input: &[u8]) -> Result<Vec<Vec<u8>>, ReplayError> {
        let mut reader = input;
        let mut buf = Vec::new();
        let mut out = Vec::new();
        let mut number = 0;
        loop {
            number += 1;
            if !read_line(&mut reader, &mut buf, number)? {
                return Ok(out);
            }
            out.push(buf.clone());
        }
    }

    #[test]
    fn line_endings_are_stripped_and_the_last_newline_is_optional() {
        let got = lines(b"a\r\nb\n\nc").unwrap();
        assert_eq!(got, [&b"a"[..], b"b", b"", b"c"]);
    }

    #[test]
    fn a_line_longer_than_the_limit_is_refused() {
        let fits = format!("{}\r\n", "x".repeat(MAX_LINE_BYTES));
        assert_eq!(lines(fits.as_bytes()).unwrap()[0].len(), MAX_LINE_BYTES);
        for long in [
            "x".repeat(MAX_LINE_BYTES + 1),
            format!("{}\n", "x".repeat(MAX_LINE_BYTES + 1)),
            "x".repeat(10 * MAX_LINE_BYTES),
        ] {
            let err = lines(long.as_bytes()).unwrap_err();
            assert!(
                matches!(
                    err,
                    ReplayError::Line {
                        line: 1,
                        problem: LineProblem::TooLong
                    }
                ),
                "{err}"
            );
        }
    }

    fn run(input: &str) -> Result<String, ReplayError> {
        let quota = Quota::per_second(2).unwrap();
        let mut out = Vec::new();
        replay(
            Limit::new(Algorithm::FixedWindow, quota),
            input.as_bytes(),
            &mut out,
        )?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn errors_carry_the_one_based_line_number() {
        let err = run("t_ns,key,cost\n0,a,1\n0,a\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 3: missing field: expected 3 fields t_ns,key,cost, found 2"
        );
        let err = run("t_ns;key;cost\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 1: bad header `t_ns;key;cost`, expected `t_ns,key,cost`"
        );
        assert!(matches!(run(""), Err(ReplayError::EmptyInput)));
    }

    #[test]
    fn the_request_is_echoed_before_its_decision() {
        // Two per second in aligned one-second windows: the third request at
        // the same instant is refused until the next window, 1 s - 5 ns away.
        let out = run("t_ns,key,cost\r\n5,k,1\r\n5,k,1\r\n5,k,1\r\n5,k,3\r\n5,k,0\r\n").unwrap();
        assert_eq!(
            out,
            "t_ns,key,cost,allowed,remaining,retry_after_ns,delay_ns\n\
             5,k,1,1,1,0,0\n\
             5,k,1,1,0,0,0\n\
             5,k,1,0,0,999999995,0\n\
             5,k,3,0,0,-1,0\n\
             5,k,0,1,0,0,0\n"
        );
    }

    #[test]
    fn the_summary_counts_requests_admissions_and_keys() {
        let quota = Quota::per_second(1).unwrap();
        let mut out = Vec::new();
        let input = "t_ns,key,cost\n0,a,1\n0,a,1\n0,b,1\n".as_bytes();
        let summary = replay(Limit::new(Algorithm::Gcra, quota), input, &mut out).unwrap();
        assert_eq!(
            summary,
            Summary {
                requests: 3,
                admitted: 2,
                keys: 2
            }
        );
    }
}
