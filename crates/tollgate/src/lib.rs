//! tollgate: exact rate limiting for services.
//!
//! Re-exports the exact core ([`tollgate_core`]) and builds on it:
//!
//! - [`Limiter`]: the keyed in-process limiter (sync, sharded, bounded in
//!   memory), with peek, refund, forced charges, leases, reservations and
//!   waiting;
//! - [`ConcurrencyLimiter`]: requests in flight per key;
//! - [`Backend`]: the one abstraction every store implements (a store of
//!   per-key state that applies a [`Policy`] atomically with its own clock),
//!   [`MemoryBackend`] for process memory, and [`Store`], a policy over any
//!   backend, so switching from memory to Redis is one line;
//! - [`Clock`]: [`MonotonicClock`] by default, [`FakeClock`] for tests.
//!
//! The async parts (`Limiter::until_ready`, `Reservation::ready`,
//! `AsyncClock`, `Backend`, `MemoryBackend`, `Store`) are behind the default
//! feature `async`, the only one that pulls in tokio: a synchronous service
//! can depend on `tollgate` with `default-features = false`.

#[cfg(feature = "async")]
mod backend;
mod clock;
mod concurrency;
mod huge;
mod keyed;
mod limiter;
#[cfg(feature = "async")]
mod memory;
mod policy;
mod rules;
mod shard_lock;
mod sharded;
#[cfg(feature = "async")]
mod store;

#[cfg(feature = "async")]
pub use backend::{Backend, BackendError};
#[cfg(feature = "async")]
pub use clock::AsyncClock;
pub use clock::{Clock, FakeClock, MonotonicClock};
pub use concurrency::{AtCapacity, ConcurrencyLimiter, Permit};
pub use limiter::{Limiter, LimiterBuilder, LimiterFull, OnFull, Reservation, WaitError};
#[cfg(feature = "async")]
pub use memory::MemoryBackend;
pub use policy::{Policy, PolicyError};
#[cfg(feature = "async")]
pub use store::Store;
pub use tollgate_core::{
    decide_all, force_all, lease_all, preview_all, refund_all, Algorithm, Decision, Lease,
    LeaseError, Limit, Quota, QuotaError, RetryAfter, State,
};
