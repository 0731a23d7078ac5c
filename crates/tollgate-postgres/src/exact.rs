//! Units and range: what the store computes in, and what it accepts.
//!
//! The schema's functions compute exactly as `tollgate-core` does, in ticks
//! of `1 / limit` ns, but in PostgreSQL `numeric`, which holds integers of
//! any size exactly (no floating point anywhere). So, unlike the Redis
//! backend, no quota is refused: every quota the core accepts (limit and
//! burst up to 10^12, periods and refill times up to 2^62 ns) is decided
//! with the core's `allowed`, `remaining`, `retry_after`, `reset_after` and
//! `delay`, to the nanosecond, with durations saturated at 2^64 - 1 ns as in
//! the core.
//!
//! - **Time**: `bigint` nanoseconds, so request times (the database clock,
//!   or the times given to [`check_at`](crate::PostgresBackend::check_at))
//!   must be below [`MAX_TIME_NS`], the year 2262 on the Unix clock. The
//!   database clock has microsecond resolution: live decisions are the
//!   core's at a whole microsecond; replayed ones at any nanosecond.
//! - **Costs**: any `u64`, sent as `numeric`.
//! - **Sliding log**: times and running totals of the live entries are
//!   `bigint`; the admitted cost inside one period is at most the limit, so
//!   only forced charges could take it past 2^63 - 1 units in one period,
//!   and those are refused with `BackendError::OutOfRange`, changing
//!   nothing (the core would cap them at 2^64 - 1; either way the key is
//!   blocked for the period).

/// Request times are accepted below this (ns since the Unix epoch, or since
/// a replayed trace's time 0).
pub const MAX_TIME_NS: u64 = i64::MAX as u64;
