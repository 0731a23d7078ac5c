//! PostgreSQL backend for tollgate.
//!
//! Every operation is one statement calling the schema's `_apply` function
//! (`sql/schema.sql` in this crate, installed by [`PostgresConfig::connect`]
//! or `tollgate migrate`), which locks the key's row, reads the database
//! clock and applies every limit of the policy atomically: all charged or
//! none. A charge against a single token bucket, GCRA or leaky meter is
//! first tried as one plain `UPDATE` (`sql/bucket_charge.sql`, one
//! statement per policy with its numbers written in), which admits it as
//! the function would at the statement's start (or the key's last time, if
//! later); a charge it does not admit takes the function, a second round
//! trip.
//!
//! Decisions are those of `tollgate-core`, to the nanosecond: the function
//! computes in the core's units with `numeric`, exact for integers of any
//! size ([`exact`] states the range). The clock is the database's
//! `clock_timestamp()` read *after* the row lock is taken, so each key sees
//! its times in order however long a request waited for the lock
//! (`now()` would be the transaction's start, earlier than a write it
//! waited for); it has microsecond resolution.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tollgate::BackendError> {
//! use tollgate::{Algorithm, Limit, Policy, Quota, Store};
//! use tollgate_postgres::PostgresBackend;
//!
//! let policy = Policy::new(Limit::new(Algorithm::Gcra, Quota::per_second(10).unwrap()));
//! let backend = PostgresBackend::connect("postgres://app@127.0.0.1/app").await?;
//! let store = Store::new(policy, backend)?;
//! let decision = store.check("user-1").await?;
//! assert!(decision.allowed);
//! # Ok(()) }
//! ```
//!
//! One row per key and policy holds the state of all the policy's limits
//! (a sliding log as arrays of times and running totals, one entry per
//! distinct admitted instant) and the time it is idle from; a periodic,
//! bounded cleanup deletes idle rows through an index with row locks only.

mod backend;
mod encoding;
mod errors;
pub mod exact;
pub mod harness;
pub mod naive;
mod numeric;
mod schema;

pub use backend::{
    PostgresBackend, PostgresConfig, PreparedPolicy, DEFAULT_CLEANUP_BATCH, DEFAULT_CLEANUP_EVERY,
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_REPLAY_FLOOR, DEFAULT_TIMEOUT,
};
pub use encoding::MAX_KEY_BYTES;
pub use schema::{
    migrate, Migration, Names, DEFAULT_SCHEMA, DEFAULT_TABLE, MAX_TABLE_LEN, SCHEMA_VERSION,
};
pub use tollgate::Operation;
