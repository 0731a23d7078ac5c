//! The schema: where the state lives, and its versioned, idempotent
//! creation under an advisory lock, so that several instances starting at
//! once (or `tollgate migrate` next to them) do not trip over each other.

use std::time::Duration;

use tokio_postgres::Client;
use tollgate::{Algorithm, BackendError};

use crate::errors::classify;

/// The schema version this crate installs and works with.
pub const SCHEMA_VERSION: i32 = 3;

/// Default schema of the state table and its functions.
pub const DEFAULT_SCHEMA: &str = "tollgate";

/// Default name of the state table.
pub const DEFAULT_TABLE: &str = "state";

/// Longest table name: the functions append up to 16 characters to it and
/// PostgreSQL identifiers stop at 63 bytes.
pub const MAX_TABLE_LEN: usize = 40;

/// PostgreSQL 14 made `extract(epoch ...)` an exact `numeric`, which the
/// database clock is read with.
const MIN_SERVER_VERSION: i32 = 140_000;

/// The database clock in nanoseconds, as the schema's `_clock_ns` reads it
/// but without the schema (a backend connecting with `migrate(false)` to a
/// schema not made yet reads it too, and fails at its first call instead).
pub(crate) const CLOCK_SQL: &str =
    "SELECT (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint";

/// Migration `n` (from 1) brings the schema from version `n - 1` to `n`.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    include_str!("../sql/schema.sql"),
    include_str!("../sql/deadline.sql"),
    include_str!("../sql/charge_helpers.sql"),
];

/// The expressions `sql/bucket_charge.sql` names, spelled out in this order
/// (each may use the ones after it), then `@NOW@`. `r` is the key's row,
/// `c` the statement's constants (`start`, `cap` and `cost` in ticks).
/// Each state is reduced to its debt as `_bucket_family` does, written
/// with as few operators as the algorithm allows.
fn charge_terms(algorithm: Algorithm) -> [(&'static str, &'static str); 4] {
    match algorithm {
        // [tokens, last]: the tokens refill from `last` up to the capacity.
        Algorithm::TokenBucket => [
            ("@CHARGED@", "@TOKENS@ - c.cost"),
            ("@ADMITTED@", "c.cost <= @TOKENS@"),
            (
                "@IDLE@",
                "@NOW@ + div(c.cap - @TOKENS@ + c.cost - 1, $3::numeric) + 1",
            ),
            (
                "@TOKENS@",
                "least(c.cap, r.state[1] + (@NOW@ - r.state[2]) * $3::numeric)",
            ),
        ],
        // [tat, last]: the theoretical arrival time, in ticks since 0; the
        // debt is what of it lies ahead of now.
        Algorithm::Gcra => [
            ("@CHARGED@", "@TAT@ + c.cost"),
            (
                "@ADMITTED@",
                "r.state[1] + c.cost <= c.cap + @NOW@ * $3::numeric",
            ),
            ("@IDLE@", "div(@TAT@ + c.cost - 1, $3::numeric) + 1"),
            ("@TAT@", "greatest(r.state[1], @NOW@ * $3::numeric)"),
        ],
        // [level, last]: the level drains from `last`.
        _ => [
            ("@CHARGED@", "@LEVEL@ + c.cost"),
            ("@ADMITTED@", "@LEVEL@ + c.cost <= c.cap"),
            (
                "@IDLE@",
                "@NOW@ + div(@LEVEL@ + c.cost - 1, $3::numeric) + 1",
            ),
            (
                "@LEVEL@",
                "greatest(r.state[1] - (@NOW@ - r.state[2]) * $3::numeric, 0)",
            ),
        ],
    }
}

/// The decision's time, which every algorithm's terms use.
const CHARGE_NOW: (&str, &str) = ("@NOW@", "greatest(c.start, r.state[2])");

/// A schema and table name, checked to be plain lower-case identifiers (so
/// they need no quoting and cannot inject SQL).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    schema: String,
    table: String,
}

impl Names {
    /// Checks both names: `[a-z_][a-z0-9_]*`, the schema up to 63 bytes, the
    /// table up to [`MAX_TABLE_LEN`].
    pub fn new(schema: &str, table: &str) -> Result<Self, BackendError> {
        let check = |what: &str, name: &str, max: usize| {
            let mut chars = name.chars();
            let plain = chars
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
                && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if plain && name.len() <= max {
                Ok(())
            } else {
                Err(BackendError::InvalidKey(format!(
                    "the {what} name {:?} must be 1 to {max} characters of a-z, 0-9 and _, \
                     not starting with a digit",
                    name.escape_debug().to_string()
                )))
            }
        };
        check("schema", schema, 63)?;
        check("table", table, MAX_TABLE_LEN)?;
        Ok(Names {
            schema: schema.into(),
            table: table.into(),
        })
    }

    /// `schema.table`.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.schema, self.table)
    }

    /// The statement of every operation on a key (see `sql/schema.sql`).
    pub(crate) fn apply_sql(&self) -> String {
        format!(
            "SELECT {}_apply_within($1, $2, $3, $4, $5, $6, $7, $8)",
            self.qualified()
        )
    }

    /// The one-statement charge of a single limit of `algorithm`, of the
    /// bucket family (see `sql/bucket_charge.sql`).
    pub(crate) fn charge_sql(&self, algorithm: Algorithm) -> String {
        let sql = charge_terms(algorithm).iter().chain([&CHARGE_NOW]).fold(
            include_str!("../sql/bucket_charge.sql").to_owned(),
            |sql, (name, term)| sql.replace(name, term),
        );
        self.render(&sql)
    }

    pub(crate) fn reset_sql(&self) -> String {
        format!(
            "DELETE FROM {} WHERE key = $1 AND policy = $2",
            self.qualified()
        )
    }

    pub(crate) fn cleanup_sql(&self) -> String {
        format!("SELECT {}_cleanup($1, $2)", self.qualified())
    }

    fn render(&self, sql: &str) -> String {
        sql.replace("@T@", &self.qualified())
            .replace("@S@", &self.schema)
            .replace("@N@", &self.table)
    }
}

/// What [`migrate`] found and left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migration {
    /// The version before (0: no schema).
    pub from: i32,
    /// The version now, [`SCHEMA_VERSION`].
    pub to: i32,
}

/// Creates or upgrades the schema to [`SCHEMA_VERSION`] in one transaction
/// holding an advisory lock on the schema's name; a schema already current
/// costs the lock and one query. Refuses a schema newer than this crate's.
pub async fn migrate(
    client: &mut Client,
    names: &Names,
    timeout: Duration,
) -> Result<Migration, BackendError> {
    let db = |e: tokio_postgres::Error| classify(&e, timeout);
    let version: String = client
        .query_one("SHOW server_version_num", &[])
        .await
        .map_err(db)?
        .get(0);
    if version.parse::<i32>().unwrap_or(0) < MIN_SERVER_VERSION {
        return Err(BackendError::Store(format!(
            "PostgreSQL 14 or later is needed (server_version_num {version})"
        )));
    }
    let tx = client.transaction().await.map_err(db)?;
    tx.batch_execute(&format!(
        "SET LOCAL statement_timeout = {}",
        timeout.as_millis().max(1)
    ))
    .await
    .map_err(db)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        &[&format!("tollgate:{}", names.schema)],
    )
    .await
    .map_err(db)?;
    tx.batch_execute(&names.render(
        "CREATE SCHEMA IF NOT EXISTS @S@;
         CREATE TABLE IF NOT EXISTS @T@_version (version int NOT NULL);",
    ))
    .await
    .map_err(db)?;
    let from: i32 = tx
        .query_one(
            &names.render("SELECT coalesce(max(version), 0) FROM @T@_version"),
            &[],
        )
        .await
        .map_err(db)?
        .get(0);
    if from > SCHEMA_VERSION {
        return Err(BackendError::Store(format!(
            "the schema of {} is at version {from}, newer than this tollgate-postgres \
             (version {SCHEMA_VERSION}): upgrade tollgate",
            names.qualified()
        )));
    }
    for (version, sql) in MIGRATIONS.iter().enumerate().skip(from as usize) {
        tx.batch_execute(&names.render(sql)).await.map_err(db)?;
        tx.execute(
            &names.render("INSERT INTO @T@_version (version) VALUES ($1)"),
            &[&(version as i32 + 1)],
        )
        .await
        .map_err(db)?;
    }
    tx.commit().await.map_err(db)?;
    Ok(Migration {
        from,
        to: SCHEMA_VERSION,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_identifiers() {
        let n = Names::new("tollgate", "state_2").unwrap();
        assert_eq!(n.qualified(), "tollgate.state_2");
        assert!(n.render(MIGRATIONS[0]).contains("tollgate.state_2_apply("));
        for (schema, table) in [
            ("", "t"),
            ("s", ""),
            ("S", "t"),
            ("s", "1t"),
            ("s", "t; drop table x"),
            ("s", "t\"x"),
        ] {
            assert!(Names::new(schema, table).is_err(), "{schema:?} {table:?}");
        }
        assert!(Names::new("s", &"t".repeat(MAX_TABLE_LEN + 1)).is_err());
    }
}
