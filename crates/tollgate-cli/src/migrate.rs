//! `tollgate migrate`: creates or upgrades the PostgreSQL schema, so that
//! services can run with migrations off and least privileges.

use anyhow::{bail, Context};
use tollgate_postgres::{PostgresConfig, DEFAULT_SCHEMA, DEFAULT_TABLE};

use crate::postgres;

/// Flags of `tollgate migrate`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The database: postgres://USER[:PASSWORD]@HOST[:PORT]/DB.
    #[arg(long, value_name = "URL")]
    store: String,
    /// Schema of the state table and its functions.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_SCHEMA)]
    schema: String,
    /// The state table.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_TABLE)]
    table: String,
}

/// Migrates and says what it did.
pub fn run(args: Args) -> anyhow::Result<()> {
    if !postgres::is_postgres(&args.store) {
        bail!(
            "`tollgate migrate` is for PostgreSQL stores (postgres://...), not `{}`",
            tollgate_redis::redact(&args.store)
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let config = PostgresConfig::new(&args.store)
        .schema(&args.schema)
        .table(&args.table);
    let done = runtime
        .block_on(config.run_migrations())
        .with_context(|| format!("cannot migrate `{}`", tollgate_redis::redact(&args.store)))?;
    let table = format!("{}.{}", args.schema, args.table);
    if done.from == done.to {
        println!("{table}: schema already at version {}", done.to);
    } else {
        println!(
            "{table}: schema migrated from version {} to {}",
            done.from, done.to
        );
    }
    Ok(())
}
