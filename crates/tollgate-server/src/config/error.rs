//! Configuration errors, each naming the file, line and column.

use std::fmt;

use serde_saphyr::{Location, MessageFormatter, UserMessageFormatter};

/// Why a configuration was refused: `file:line:column: message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file, as given.
    pub file: String,
    /// 1-based line, 0 when the error is about the whole file.
    pub line: u64,
    /// 1-based column, 0 when the error is about the whole file.
    pub column: u64,
    /// What is wrong, in words.
    pub message: String,
}

impl ConfigError {
    /// An error at `location` in `file`.
    pub(crate) fn at(file: &str, location: Location, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_string(),
            line: location.line(),
            column: location.column(),
            message: message.into(),
        }
    }

    /// An error about the whole file (unreadable, empty).
    pub(crate) fn unlocated(file: &str, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_string(),
            line: 0,
            column: 0,
            message: message.into(),
        }
    }

    /// A parse or type error from the YAML reader.
    pub(crate) fn from_yaml(file: &str, err: &serde_saphyr::Error) -> Self {
        let location = err.location().unwrap_or(Location::UNKNOWN);
        // The message alone: the location is ours to write (once), and the
        // user's wording leaves out the reader's own settings.
        let message = UserMessageFormatter.format_message(err);
        // serde's words for a number of the wrong form name a Rust type.
        let message = message
            .trim()
            .replace("invalid u64", "expected a whole number, 0 or more")
            .replace("invalid u32", "expected a whole number, 0 or more");
        ConfigError::at(file, location, escape_controls(&message))
    }
}

/// Control bytes from the file shown as escapes, so an error message never
/// drives the terminal.
fn escape_controls(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file, self.line, self.column, self.message
            )
        }
    }
}

impl std::error::Error for ConfigError {}
