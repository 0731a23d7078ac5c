//! `tollgate`: the command-line front end.
//!
//! One module per subcommand, each with `Args` (its flags) and `run`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod check;
mod replay;
mod serve;
mod simulate;
mod store;

/// Exact rate limiting: replay traces through any of the seven algorithms.
#[derive(Parser)]
#[command(name = "tollgate", version, about)]
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
    /// Make one decision in a shared store (Redis) and print it as JSON.
    Check(check::Args),
    /// Serve rate limits: Envoy's gRPC API, an HTTP JSON API, a reverse proxy.
    Serve(serve::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay(args) => replay::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Check(args) => check::run(args),
        Command::Serve(args) => serve::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tollgate: {err:#}");
            ExitCode::FAILURE
        }
    }
}
