//! Shared by the PostgreSQL tests: one server per test binary, fresh key
//! prefixes, backends with deadlines generous enough for a busy machine.

#![allow(dead_code)] // each test binary uses a different part

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tollgate_postgres::harness::{skip_requested, PgServer};
use tollgate_postgres::{PostgresBackend, PostgresConfig};

/// The test binary's shared server, or `None` when the PostgreSQL tests are
/// skipped on purpose. Fails (naming the package to install) when the
/// binaries are missing.
pub fn shared() -> Option<&'static PgServer> {
    if skip_requested() {
        return None;
    }
    Some(PgServer::shared().unwrap_or_else(|e| panic!("{e}")))
}

/// A server of the test's own (for stopping and restarting it).
pub fn own() -> Option<PgServer> {
    if skip_requested() {
        return None;
    }
    Some(PgServer::start().unwrap_or_else(|e| panic!("{e}")))
}

/// A prefix no other test in this process uses.
pub fn fresh_prefix() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "t{}-{}:",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Defaults for tests: a fresh prefix, a generous deadline, no background
/// cleanup (tests that want it call it).
pub fn config(url: &str) -> PostgresConfig {
    PostgresConfig::new(url)
        .prefix(fresh_prefix())
        .timeout(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(10))
        .cleanup_every(None)
}

pub async fn backend(url: &str) -> PostgresBackend {
    config(url).connect().await.expect("connect")
}
