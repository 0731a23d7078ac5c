//! The schema: where the state lives, and its versioned, idempotent
//! creation under an advisory lock, so that several instances starting at
//! once (or `tollgate migrate` next to them) do not trip over each other.

use std::time::Duration;

use tokio_postgres::Client;
use tollgate::{Algorithm, BackendError};
use tollgate_core::Limit;

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

/// Where the one-statement charge (`sql/bucket_charge.sql`) takes its
/// time from, which also decides its last parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChargeClock {
    /// The statement's start on the database clock; `$4` is the caller's
    /// deadline (`timestamptz`), past which the statement charges nothing.
    Database,
    /// `$4`, a replayed time in ns (`numeric`); the row is kept at least
    /// `floor_ns` past it.
    Replayed {
        /// Least time the row is kept past the charge.
        floor_ns: u64,
    },
}

/// A minute in ns: `idle_at` is rounded up to one (see `sql/bucket_charge.sql`).
const IDLE_ROUNDING_NS: u128 = 60_000_000_000;

/// `CHARGED` and `ADMITTED` of `sql/bucket_charge.sql` for `algorithm`,
/// with `@START@` the statement's time, `@L@` the limit and `@CAP@` the
/// capacity in ticks, `$3` the cost in ticks. Each state is reduced to its
/// debt as `_bucket_family` does at NOW, the later of START and the key's
/// last time (a write this statement waited for), written with as few
/// operators as the algorithm allows: a comparison with the capacity that
/// the cost alone always passes (cost <= capacity) is left out, and NOW is
/// spelled out only where START would not do.
fn charge_terms(algorithm: Algorithm) -> [&'static str; 2] {
    match algorithm {
        // [tokens, last]: the tokens refill from `last` up to the capacity.
        Algorithm::TokenBucket => [
            "least(@CAP@, r.state[1] + greatest(@START@ - r.state[2], 0) * @L@) - $3::numeric",
            "r.state[1] + greatest(@START@ - r.state[2], 0) * @L@ >= $3::numeric",
        ],
        // [tat, last]: the theoretical arrival time, in ticks since 0; the
        // debt is what of it lies ahead of now. Every write leaves it at or
        // after `last * l` (`_bucket_family` at `last * l` plus a debt, this
        // statement past it), so the TAT is the later of it and START's.
        Algorithm::Gcra => [
            "greatest(r.state[1], @START@ * @L@) + $3::numeric",
            "r.state[1] + $3::numeric <= greatest(@START@, r.state[2]) * @L@ + @CAP@",
        ],
        // [level, last]: the level drains from `last`.
        _ => [
            "greatest(r.state[1] - greatest(@START@ - r.state[2], 0) * @L@, 0) + $3::numeric",
            "r.state[1] - greatest(@START@ - r.state[2], 0) * @L@ + $3::numeric <= @CAP@",
        ],
    }
}

/// `START` and `FROM` of `sql/bucket_charge.sql` for `clock`.
fn charge_clock_terms(clock: ChargeClock) -> [&'static str; 2] {
    match clock {
        // The start as an exact integer (`extract` gives microseconds as
        // decimals), computed once.
        ChargeClock::Database => [
            "c.start",
            "FROM (SELECT trunc(extract(epoch FROM statement_timestamp()) * 1000000000) AS start \
             WHERE statement_timestamp() <= $4::timestamptz OFFSET 0) AS c",
        ],
        ChargeClock::Replayed { .. } => ["$4::numeric", ""],
    }
}

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

    /// The one-statement charge (see `sql/bucket_charge.sql`) of a single
    /// `limit` of the bucket family, its numbers written in: one statement
    /// per policy, which the server plans once per connection.
    pub(crate) fn charge_sql(&self, limit: &Limit, clock: ChargeClock) -> String {
        let q = &limit.quota;
        let cap = u128::from(q.burst()) * u128::from(q.period_ns());
        let l = u128::from(q.limit());
        // The debt after an admitted charge is at most the capacity: idle
        // by the capacity's drain time (or the floor) past the charge.
        let floor = match clock {
            ChargeClock::Database => 0,
            ChargeClock::Replayed { floor_ns } => u128::from(floor_ns),
        };
        let ahead = cap.div_ceil(l).max(floor) + IDLE_ROUNDING_NS - 1;
        let [charged, admitted] = charge_terms(limit.algorithm);
        let [start, from] = charge_clock_terms(clock);
        let sql = include_str!("../sql/bucket_charge.sql")
            .replace("@CHARGED@", charged)
            .replace("@ADMITTED@", admitted)
            .replace("@FROM@", from)
            .replace("@START@", start)
            .replace("@L@", &format!("{l}::numeric"))
            .replace("@CAP@", &format!("{cap}::numeric"))
            .replace("@AHEAD@", &ahead.to_string());
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
