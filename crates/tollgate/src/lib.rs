//! tollgate: exact rate limiting for services.
//!
//! Re-exports the exact core ([`tollgate_core`]) and builds on it:
//!
//! - [`Limiter`]: the keyed in-process limiter (sync, sharded, bounded in
//!   memory), with peek, refund, forced charges, leases, reservations and
//!   waiting;
//! - [`CompactKey`]: the string key kept inline in the limiter's table, looked up
//!   by [`KeyStr`] without allocating;
//! - [`ConcurrencyLimiter`]: requests in flight per key;
//! - [`Backend`]: the one abstraction every store implements (a store of
//!   per-key state that applies a [`Policy`] atomically with its own clock),
//!   [`MemoryBackend`] for process memory, and [`Store`], a policy over any
//!   backend, so switching from memory to Redis is one line;
//! - [`Resilient`]: any backend with a deadline per call, a circuit
//!   [`Breaker`] and, per policy, fail open, fail closed or an in-process
//!   fallback holding this instance's share ([`OnStoreError`]);
//! - [`Batched`]: batched reservations, leasing hot keys' units from the
//!   store and spending them in process;
//! - [`top`]: who is being limited right now, a bounded heavy-hitter
//!   summary of each rule's keys over sliding windows;
//! - [`Clock`]: [`MonotonicClock`] by default, [`FakeClock`] for tests.
//!
//! What every decision means, for every algorithm and store, is written down
//! in `docs/SEMANTICS.md` in the repository.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Algorithm, FakeClock, Limit, Limiter, Quota, RetryAfter};
//!
//! // 100 a minute through GCRA, bursts of up to 10, on a clock the example moves.
//! let quota = Quota::per_minute(100)?.with_burst(10)?;
//! let clock = FakeClock::new();
//! let limiter = Limiter::builder(Limit::new(Algorithm::Gcra, quota))
//!     .clock(clock.clone())
//!     .build();
//!
//! for _ in 0..10 {
//!     assert!(limiter.check("user-42").allowed);
//! }
//! let denied = limiter.check("user-42");
//! assert!(!denied.allowed);
//! // One emission interval, 60 s / 100, until the next one fits: exact, in ns.
//! assert_eq!(denied.retry_after, RetryAfter::After(600_000_000));
//! assert!(limiter.check("someone-else").allowed); // keys are independent
//!
//! clock.advance(Duration::from_millis(600));
//! assert!(limiter.check("user-42").allowed);
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! The async parts (`Limiter::until_ready`, `Reservation::ready`,
//! `AsyncClock`, `Backend`, `MemoryBackend`, `Store`) are behind the default
//! feature `async`, the only one that pulls in tokio: a synchronous service
//! can depend on `tollgate` with `default-features = false`.

#[cfg(feature = "async")]
mod backend;
#[cfg(feature = "async")]
mod batched;
mod breaker;
mod clock;
mod compact_key;
mod concurrency;
#[cfg(feature = "async")]
mod counters;
mod huge;
mod keyed;
mod limiter;
#[cfg(feature = "async")]
mod memory;
mod owned_keys;
mod policy;
mod readers;
#[cfg(feature = "async")]
mod resilient;
mod rules;
mod shard_lock;
mod sharded;
#[cfg(feature = "async")]
mod store;
mod table;
pub mod top;

#[cfg(feature = "async")]
pub use backend::{Backend, BackendError, BackendExt, Operation, Outcome};
#[cfg(feature = "async")]
pub use batched::{Batch, BatchConfig, BatchStats, Batched};
pub use breaker::{Breaker, BreakerConfig, BreakerState, CallPermit};
#[cfg(feature = "async")]
pub use clock::AsyncClock;
pub use clock::{Clock, FakeClock, MonotonicClock, UnixClock};
pub use compact_key::{CompactKey, KeyStr};
pub use concurrency::{AtCapacity, ConcurrencyLimiter, Permit};
pub use limiter::{Limiter, LimiterBuilder, LimiterFull, OnFull, Reservation, WaitError};
#[cfg(feature = "async")]
pub use memory::MemoryBackend;
pub use policy::{Policy, PolicyError};
#[cfg(feature = "async")]
pub use resilient::{
    FailurePolicy, Guarded, OnStoreError, ResilienceStats, Resilient, ResilientBuilder,
    DEFAULT_DEADLINE,
};
#[cfg(feature = "async")]
pub use store::Store;
pub use tollgate_core::{
    decide_all, force_all, lease_all, preview_all, refund_all, Algorithm, Decision, Lease,
    LeaseError, Limit, Quota, QuotaError, RetryAfter, State,
};
