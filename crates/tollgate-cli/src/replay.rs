//! `tollgate replay`: a CSV trace of requests in, one decision per request out.

use std::fs::File;
use std::io::{self, BufReader, BufWriter};
use std::path::PathBuf;

use anyhow::Context;
use tollgate_cli::output_file::OutputFile;
use tollgate_cli::rule_args::RuleArgs;
use tollgate_cli::trace;
use tollgate_core::Limit;

use crate::timeout::Timeout;

/// Big enough that reads and writes are rare next to the parsing.
const IO_BUFFER_BYTES: usize = 256 * 1024;

/// Flags of `tollgate replay`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Input: CSV with the header `t_ns,key,cost`.
Output: CSV with the header `t_ns,key,cost,allowed,remaining,retry_after_ns,delay_ns`,
one line per request in input order; retry_after_ns is -1 when the cost can never fit.")]
pub struct Args {
    #[command(flatten)]
    rule: RuleArgs,
    /// The trace to read; standard input when absent.
    #[arg(long, value_name = "FILE")]
    input: Option<PathBuf>,
    /// Where to write the decisions; standard output when absent. A regular
    /// file (or a symbolic link's target) is replaced in one step once the
    /// run succeeded, keeping its permissions; a FIFO or device is written
    /// directly, as it goes.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Replay through a shared store instead of in process, with the trace's
    /// own times: redis://HOST:PORT or redis+cluster://HOST:PORT[,...].
    /// Times must be whole microseconds; durations are rounded up to one.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    #[command(flatten)]
    timeout: Timeout,
}

/// Through the store when `--store` is given, else in process.
fn replay_through<W: std::io::Write>(
    store: Option<&str>,
    timeout: &Timeout,
    rule: Limit,
    input: impl io::BufRead,
    output: W,
) -> anyhow::Result<()> {
    match store {
        Some(url) => crate::store::replay(url, rule, timeout.duration(), input, output).map(drop),
        None => trace::replay(rule, input, output)
            .map(drop)
            .map_err(Into::into),
    }
}

/// Replays the trace and writes the decisions.
pub fn run(args: Args) -> anyhow::Result<()> {
    let rule = args.rule.rule()?;

    let stdin = io::stdin();
    let input: Box<dyn io::BufRead> = match &args.input {
        Some(path) => {
            let file =
                File::open(path).with_context(|| format!("cannot open `{}`", path.display()))?;
            Box::new(BufReader::with_capacity(IO_BUFFER_BYTES, file))
        }
        None => Box::new(BufReader::with_capacity(IO_BUFFER_BYTES, stdin.lock())),
    };

    match &args.output {
        Some(path) => {
            let mut file = OutputFile::create(path)
                .with_context(|| format!("cannot create `{}`", path.display()))?;
            replay_through(
                args.store.as_deref(),
                &args.timeout,
                rule,
                input,
                BufWriter::with_capacity(IO_BUFFER_BYTES, &mut file),
            )?;
            file.commit()
                .with_context(|| format!("cannot write `{}`", path.display()))?;
        }
        None => {
            let stdout = io::stdout();
            replay_through(
                args.store.as_deref(),
                &args.timeout,
                rule,
                input,
                BufWriter::with_capacity(IO_BUFFER_BYTES, stdout.lock()),
            )?;
        }
    }
    Ok(())
}
