//! `tollgate`: the command-line front end.
//!
//! One module per subcommand, each with `Args` (its flags) and `run`.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use failure::Failure;

/// mimalloc rather than the system allocator: a request through the
/// server's proxy makes about twenty allocations, and glibc's malloc spent
/// more instructions on them than mimalloc does (docs/PERFORMANCE.md,
/// "Session 13").
#[global_allocator]
static ALLOCATOR: allocator::MiMalloc = allocator::MiMalloc;

mod allocator;
mod check;
mod failure;
mod loadtest;
mod migrate;
mod postgres;
mod replay;
mod serve;
mod simulate;
mod store;
mod terminal;
mod timeout;
mod whatif;

/// Exact rate limiting: replay traces through any of the seven algorithms.
#[derive(Parser)]
// Plain: clap strips escape sequences from styled text, user input included,
// so a message would quote something other than what was typed; unstyled,
// the input reaches `report_clap` as typed and is escaped there.
#[command(name = "tollgate", version, about, styles = clap::builder::Styles::plain())]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Subcommand)]
enum Command {
    /// Replay a CSV trace of requests through one algorithm.
    Replay(replay::Args),
    /// Rerun the published rate-limiting experiments and write a report with charts.
    Simulate(simulate::Args),
    /// Make one decision in a shared store (Redis, PostgreSQL) and print it as JSON.
    Check(check::Args),
    /// Create or upgrade the PostgreSQL schema of a shared store.
    Migrate(migrate::Args),
    /// Serve rate limits: Envoy's gRPC API, an HTTP JSON API, a reverse proxy.
    Serve(Box<serve::Args>),
    /// Load-test a real endpoint and report what its clients get.
    Loadtest(loadtest::Args),
    /// Decide candidate limits over an access log and report whom each would refuse.
    WhatIf(whatif::Args),
}

fn main() -> ExitCode {
    // The matches are kept: `serve` tells a flag given from its default.
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches).map(|cli| (cli, matches)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => return failure::report_clap(error),
    };
    let result = match cli.command {
        Command::Replay(args) => replay::run(args)
            .map(|()| ExitCode::SUCCESS)
            .map_err(Failure::from),
        Command::Simulate(args) => simulate::run(args)
            .map(|()| ExitCode::SUCCESS)
            .map_err(Failure::from),
        Command::Check(args) => check::run(args),
        Command::Migrate(args) => migrate::run(args)
            .map(|()| ExitCode::SUCCESS)
            .map_err(Failure::from),
        Command::Serve(args) => serve::run(*args, matches.subcommand_matches("serve"))
            .map(|()| ExitCode::SUCCESS)
            .map_err(Failure::from),
        Command::Loadtest(args) => loadtest::run(args)
            .map(|()| ExitCode::SUCCESS)
            .map_err(Failure::from),
        Command::WhatIf(args) => whatif::run(args)
            .map(|()| ExitCode::SUCCESS)
            .map_err(Failure::from),
    };
    result.unwrap_or_else(Failure::report)
}
