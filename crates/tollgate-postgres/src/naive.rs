//! The racy way, for comparison only: a fixed window kept by reading the
//! count, deciding in the application and writing the new count back, in
//! separate statements. Two callers that read the same count both admit,
//! so under concurrency it lets more than the limit through; the race
//! example, a test and the benchmark show it next to [`PostgresBackend`](crate::PostgresBackend).
//!
//! Do not use it to limit anything.

use tokio_postgres::Client;

/// A read-then-write fixed window of `limit` per hour in its own table.
pub struct NaiveWindow {
    table: String,
    limit: i64,
}

impl NaiveWindow {
    /// Creates `table` (a plain identifier) if needed; `limit` per hour.
    pub async fn create(
        client: &Client,
        table: &str,
        limit: i64,
    ) -> Result<Self, tokio_postgres::Error> {
        client
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {table} (
                     key text PRIMARY KEY, window_start bigint NOT NULL, count bigint NOT NULL)"
            ))
            .await?;
        Ok(NaiveWindow {
            table: table.into(),
            limit,
        })
    }

    /// Reads the key's count, decides here, then writes `count + 1`: two
    /// round trips with nothing holding the row in between.
    pub async fn check(&self, client: &Client, key: &str) -> Result<bool, tokio_postgres::Error> {
        let hour = 3_600_000_000_000_i64;
        let now: i64 = client
            .query_one(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint",
                &[],
            )
            .await?
            .get(0);
        let window = now - now % hour;
        let row = client
            .query_opt(
                &format!(
                    "SELECT window_start, count FROM {} WHERE key = $1",
                    self.table
                ),
                &[&key],
            )
            .await?;
        let count = match row {
            Some(r) if r.get::<_, i64>(0) == window => r.get::<_, i64>(1),
            _ => 0,
        };
        if count + 1 > self.limit {
            return Ok(false);
        }
        client
            .execute(
                &format!(
                    "INSERT INTO {} (key, window_start, count) VALUES ($1, $2, $3)
                     ON CONFLICT (key) DO UPDATE SET window_start = $2, count = $3",
                    self.table
                ),
                &[&key, &window, &(count + 1)],
            )
            .await?;
        Ok(true)
    }
}
