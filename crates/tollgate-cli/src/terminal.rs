//! What the report-writing subcommands (`simulate`, `loadtest`) show on the
//! terminal: a progress bar on standard error and the summary on standard
//! output.

use std::io::{IsTerminal, Write};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar of `total` units on standard error, labelled `label`;
/// hidden when that is not a terminal.
pub struct Bar(pub ProgressBar);

impl Bar {
    /// A bar, visible only on a terminal.
    pub fn new(label: &str, total: u64) -> anyhow::Result<Self> {
        if !std::io::stderr().is_terminal() {
            return Ok(Bar(ProgressBar::hidden()));
        }
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template(&format!(
                "{label} {{bar:40}} {{percent:>3}}% eta {{eta}}"
            ))
            .context("progress bar template")?,
        );
        Ok(Bar(bar))
    }
}

impl tollgate_sim::Progress for Bar {
    fn advance(&self, units: u64) {
        self.0.inc(units);
    }
}

/// Prints the summary. A reader that stops early (`| head`) is not an
/// error: the report is already on disk.
pub fn print_summary(summary: &str) -> anyhow::Result<()> {
    match std::io::stdout().lock().write_all(summary.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(e).context("cannot print the summary")
        }
        _ => Ok(()),
    }
}

/// Parses a subcommand's flags alone, for its tests.
#[cfg(test)]
pub fn parse_args<A: clap::Args + clap::FromArgMatches>(
    name: &'static str,
    argv: &[&str],
) -> Result<A, clap::Error> {
    let matches = A::augment_args(clap::Command::new(name))
        .try_get_matches_from(std::iter::once(name).chain(argv.iter().copied()))?;
    A::from_arg_matches(&matches)
}
