//! The log formats read: nginx-style `log_format` strings (the combined
//! format among them), Envoy's JSON access logs, and `tollgate replay`'s
//! CSV trace.

pub mod envoy;
pub mod nginx;

use std::fmt;

use crate::fields::{Fields, Wanted};

pub use nginx::{FormatError, LogFormat};

/// Why a line was not read (the line itself goes to the samples).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Malformed {
    /// The line does not have the format's layout.
    Layout,
    /// The time is missing or not a valid date.
    Time,
    /// The request is not `METHOD PATH [PROTOCOL]`.
    Request,
    /// A field that must be text is not UTF-8.
    Utf8,
    /// Not a JSON object.
    Json(String),
    /// A CSV trace line, with the trace parser's reason.
    Trace(String),
    /// Longer than [`crate::input::MAX_LINE_BYTES`].
    TooLong,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Malformed::Layout => f.write_str("does not match the log format"),
            Malformed::Time => f.write_str("no valid time"),
            Malformed::Request => f.write_str("the request is not METHOD PATH PROTOCOL"),
            Malformed::Utf8 => f.write_str("a field is not valid UTF-8"),
            Malformed::Json(e) => write!(f, "not a JSON object: {e}"),
            Malformed::Trace(e) => f.write_str(e),
            Malformed::TooLong => write!(f, "longer than {} bytes", crate::input::MAX_LINE_BYTES),
        }
    }
}

/// How lines are read.
#[derive(Clone, Debug)]
pub enum Format {
    /// A `log_format` (combined, common or custom).
    Nginx(LogFormat),
    /// One Envoy JSON access-log object per line.
    Envoy,
    /// `t_ns,key,cost` with its header, as `tollgate replay` reads.
    Trace,
}

/// A format named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FormatName {
    /// `combined`, `common` or a `log_format` string.
    Nginx(String),
    /// `envoy-json`.
    Envoy,
    /// `csv`.
    Trace,
}

impl FormatName {
    /// `combined`, `combined-xff`, `common`, `envoy-json`, `csv`, or a `log_format` string
    /// (anything with a `$`).
    pub fn parse(text: &str) -> Result<Self, FormatError> {
        match text {
            "combined" | "combined-xff" | "common" => Ok(FormatName::Nginx(text.into())),
            "envoy-json" | "envoy" | "json" => Ok(FormatName::Envoy),
            "csv" | "trace" => Ok(FormatName::Trace),
            t if t.contains('$') => Ok(FormatName::Nginx(t.into())),
            t => Err(FormatError::new(format!(
                "unknown format `{}`: expected combined, combined-xff, common, envoy-json, csv or a log_format string with $variables",
                t.escape_debug()
            ))),
        }
    }

    /// The format, reading only what `wanted` names.
    pub fn compile(&self, wanted: &Wanted) -> Result<Format, FormatError> {
        Ok(match self {
            FormatName::Nginx(f) => Format::Nginx(LogFormat::compile(f, wanted)?),
            FormatName::Envoy => Format::Envoy,
            FormatName::Trace => Format::Trace,
        })
    }
}

/// Reads one CSV trace line (the header is skipped by the caller).
pub fn trace_line(line: &[u8]) -> Result<Fields<'_>, Malformed> {
    let r =
        tollgate_trace::trace::parse_request(line).map_err(|p| Malformed::Trace(p.to_string()))?;
    Ok(Fields {
        t_ns: Some(r.t_ns),
        key: Some(r.key),
        cost: Some(r.cost),
        ..Fields::default()
    })
}
