//! How a failed command ends: one line on standard error and an exit status.

use std::io;
use std::process::ExitCode;

use tollgate_cli::escape::escape_controls;

/// Exit status of a command that failed for any reason other than those
/// below (an unreadable file, a malformed trace, an invalid quota outside
/// `check`).
pub const GENERAL: u8 = 1;
/// Exit status of a usage error: clap's own (bad flags), and for `check`
/// also a quota or policy that cannot be used.
pub const USAGE: u8 = 2;
/// Exit status of `check` when the store failed (unreachable, too slow,
/// a server error).
pub const STORE: u8 = 3;
/// Exit status when the reader of our output went away (`| head -1`): what
/// the shell reports for `cat` in the same place (128 + SIGPIPE). Nothing is
/// printed.
pub const BROKEN_PIPE: u8 = 141;

/// A failed command: the error and the exit status it calls for.
#[derive(Debug)]
pub struct Failure {
    status: u8,
    error: anyhow::Error,
}

impl Failure {
    /// `error`, ending the command with `status`.
    pub fn new(status: u8, error: impl Into<anyhow::Error>) -> Self {
        Failure {
            status,
            error: error.into(),
        }
    }

    /// Prints the error (unless the output pipe was closed) and returns the
    /// exit status.
    pub fn report(self) -> ExitCode {
        if is_broken_pipe(&self.error) {
            return ExitCode::from(BROKEN_PIPE);
        }
        eprintln!("tollgate: {}", message(&self.error));
        ExitCode::from(self.status)
    }
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(error: E) -> Self {
        Failure::new(GENERAL, error)
    }
}

/// Whether writing failed because the reader closed the pipe.
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// The error and its causes on one line, `context: cause: root`, with
/// control characters escaped. A cause that its parent's text already ends
/// with is not repeated, whichever error type chose to print its source
/// itself.
pub fn message(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let part = cause.to_string();
        if text.ends_with(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    escape_controls(&text).into_owned()
}

/// Prints a clap error or help with control characters escaped (a flag's
/// value is quoted in clap's messages), and returns its exit status.
pub fn report_clap(error: clap::Error) -> ExitCode {
    if !error.use_stderr() {
        // Help and version: our own text, printed as clap prints it.
        error.exit();
    }
    let rendered = error.render().ansi().to_string();
    let lines: Vec<_> = rendered.lines().map(escape_controls).collect();
    eprintln!("{}", lines.join("\n"));
    ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(USAGE))
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use anyhow::Context;

    use super::*;

    /// An error that prints its source in its own text and also returns it
    /// as its source, the mistake that made messages say "X: X".
    #[derive(Debug)]
    struct Doubled(io::Error);

    impl fmt::Display for Doubled {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "writing: {}", self.0)
        }
    }

    impl std::error::Error for Doubled {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn no_cause_is_printed_twice() {
        let root = || io::Error::from(io::ErrorKind::IsADirectory);
        let error = anyhow::Error::new(Doubled(root())).context("cannot write `x`");
        assert_eq!(
            message(&error),
            format!("cannot write `x`: writing: {}", root())
        );
        let plain = Err::<(), _>(root()).context("a").context("b").unwrap_err();
        assert_eq!(message(&plain), format!("b: a: {}", root()));
    }

    #[test]
    fn control_characters_in_any_part_are_escaped() {
        let error = anyhow::anyhow!("key \x1b]0;x\x07").context("line\r2");
        assert_eq!(message(&error), r"line\r2: key \x1b]0;x\x07");
    }

    #[test]
    fn a_closed_pipe_anywhere_in_the_chain_is_recognised() {
        let pipe = Err::<(), _>(io::Error::from(io::ErrorKind::BrokenPipe))
            .context("writing")
            .unwrap_err();
        assert!(is_broken_pipe(&pipe));
        assert!(!is_broken_pipe(&anyhow::anyhow!("Broken pipe")));
    }
}
