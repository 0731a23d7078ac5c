//! Structured logs through `tracing`: human text or one JSON object per
//! line, filtered by a `RUST_LOG`-style directive (`info`,
//! `tollgate_server=debug`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

/// Installs the process's log subscriber; `filter` as in `RUST_LOG`.
/// Fails on a bad filter, and when a subscriber is already installed.
pub fn init(format: LogFormat, filter: &str) -> Result<(), String> {
    let filter =
        EnvFilter::try_new(filter).map_err(|e| format!("invalid log filter `{filter}`: {e}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colours for a person at a terminal; none in a file or a pipe,
        // where escape codes would be noise in every line.
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    installed.map_err(|e| e.to_string())
}
