//! `--timeout`: the deadline of each call to a shared store.

use std::sync::LazyLock;
use std::time::Duration;

use tollgate_cli::duration::{format_duration, parse_duration};
use tollgate_redis::DEFAULT_TIMEOUT;

/// The library's default deadline as a flag value: one default for the
/// command and for a service using `tollgate-redis`.
pub(crate) static DEFAULT: LazyLock<String> =
    LazyLock::new(|| format_duration(DEFAULT_TIMEOUT.as_nanos() as u64));

/// `--timeout DURATION`, flattened into a subcommand that uses a store.
#[derive(clap::Args, Debug, Clone)]
pub struct Timeout {
    /// Deadline of each store call, at least 1ns; the default is the
    /// library's (RedisConfig::timeout). A call that ran out of time may
    /// still have been charged. Connecting has its own deadline of 1s.
    #[arg(long = "timeout", value_name = "DURATION", value_parser = parse_timeout,
          default_value = DEFAULT.as_str())]
    ns: u64,
}

/// A duration of at least 1 ns: a zero deadline would fail every call.
pub(crate) fn parse_timeout(text: &str) -> Result<u64, String> {
    match parse_duration(text) {
        Ok(0) => Err("a deadline of 0 fails every call; give at least 1ns".into()),
        Ok(ns) => Ok(ns),
        Err(e) => Err(e.to_string()),
    }
}

impl Timeout {
    /// The deadline.
    pub fn duration(&self) -> Duration {
        Duration::from_nanos(self.ns)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use tollgate_redis::DEFAULT_CONNECT_TIMEOUT;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        timeout: Timeout,
    }

    fn parse(argv: &[&str]) -> Result<Duration, clap::Error> {
        Cli::try_parse_from(std::iter::once("check").chain(argv.iter().copied()))
            .map(|c| c.timeout.duration())
    }

    #[test]
    fn the_default_is_the_librarys() {
        assert_eq!(parse(&[]).unwrap(), DEFAULT_TIMEOUT);
        assert_eq!(DEFAULT.as_str(), "50ms");
        // The help states the connect deadline in words.
        assert_eq!(DEFAULT_CONNECT_TIMEOUT, Duration::from_secs(1));
    }

    #[test]
    fn a_timeout_is_a_positive_duration() {
        assert_eq!(parse(&["--timeout", "2s"]).unwrap(), Duration::from_secs(2));
        let zero = parse(&["--timeout", "0ms"]).unwrap_err().to_string();
        assert!(zero.contains("at least 1ns"), "{zero}");
        assert!(parse(&["--timeout", "2"]).is_err());
    }
}
