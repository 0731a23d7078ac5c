//! PostgreSQL decides exactly like the core: random traces of checks,
//! refunds, forced charges and leases with nanosecond times, every
//! algorithm, single and layered policies.

mod common;

use tollgate_postgres::PostgresBackend;
use tollgate_testkit::agreement::Agreement;

/// Periods from a few ns to a minute, odd ones included.
const PERIODS_NS: &[u64] = &[7, 1_000, 999_983, 999_999_937, 60_000_000_000];

#[test]
fn postgres_decides_like_the_core_on_random_traces() {
    let Some(server) = common::shared() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pg: PostgresBackend = rt.block_on(common::backend(&server.url()));
    // The database keeps nanoseconds: its numbers are the core's as they are.
    Agreement::new(PERIODS_NS, 1).run(
        |_, key, policy, op, now_ns| rt.block_on(pg.apply_at(key, policy, op, now_ns)),
        |decision| decision,
    );
}
