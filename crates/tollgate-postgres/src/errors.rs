//! Client and pool failures as the typed [`BackendError`] kinds a caller
//! fails open, closed or over by. Messages come from the server or the
//! driver, never from the connection string, so no password can leak.

use std::time::Duration;

use deadpool_postgres::PoolError;
use tokio_postgres::error::SqlState;
use tollgate::BackendError;

/// What the server or the driver said, by kind.
pub(crate) fn classify(e: &tokio_postgres::Error, deadline: Duration) -> BackendError {
    if let Some(db) = e.as_db_error() {
        let code = db.code();
        let said = format!("{} ({})", db.message(), code.code());
        return if *code == SqlState::QUERY_CANCELED || *code == SqlState::LOCK_NOT_AVAILABLE {
            // statement_timeout, set to the deadline on every connection.
            BackendError::Timeout(deadline)
        } else if *code == SqlState::NUMERIC_VALUE_OUT_OF_RANGE {
            // Raised by the functions before changing anything.
            BackendError::OutOfRange(said)
        } else if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
            BackendError::Unavailable(format!(
                "the database is read-only (a standby?); decisions need a primary: {said}"
            ))
        } else if code.code().starts_with("08")
            || code.code().starts_with("57P")
            || *code == SqlState::TOO_MANY_CONNECTIONS
        {
            // Connection exceptions, shutdown, restart, recovery.
            BackendError::Unavailable(said)
        } else if *code == SqlState::UNDEFINED_FUNCTION
            || *code == SqlState::UNDEFINED_TABLE
            || *code == SqlState::INVALID_SCHEMA_NAME
        {
            BackendError::Store(format!(
                "the tollgate schema is missing or outdated; run `tollgate migrate`: {said}"
            ))
        } else {
            BackendError::Store(said)
        };
    }
    let io_kind = std::iter::successors(std::error::Error::source(e), |s| s.source())
        .find_map(|s| s.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind);
    match io_kind {
        Some(std::io::ErrorKind::TimedOut) => BackendError::Timeout(deadline),
        Some(_) => BackendError::Unavailable(e.to_string()),
        None if e.is_closed() => BackendError::Unavailable(e.to_string()),
        // The driver's own errors: connect timeouts, protocol, conversions.
        None if e.to_string().contains("timeout") => BackendError::Timeout(deadline),
        None => BackendError::Store(e.to_string()),
    }
}

/// A pool failure: waiting for or creating a connection.
pub(crate) fn from_pool(e: PoolError, deadline: Duration) -> BackendError {
    match e {
        PoolError::Timeout(_) => BackendError::Timeout(deadline),
        PoolError::Backend(e) => classify(&e, deadline),
        PoolError::Closed => BackendError::Unavailable("the connection pool is closed".into()),
        other => BackendError::Store(other.to_string()),
    }
}
