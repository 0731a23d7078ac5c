//! The exact decision core of tollgate.
//!
//! Every rate-limiting algorithm of `docs/SEMANTICS.md` as a pure function of
//! (per-key state, quota, now, cost): no I/O, no clock reads and no floating
//! point. Time is an input, a `u64` count of nanoseconds on the caller's clock.
//!
//! All rate arithmetic is done in *ticks* of `1 / limit` nanoseconds, so the
//! emission interval `T = period / limit` is exactly `period` ticks whatever
//! the quota; intermediate values are `u128`, which [`Quota`]'s validation
//! keeps far from overflow.
//!
//! ```
//! use tollgate_core::{Algorithm, Quota, RetryAfter, State};
//!
//! let quota = Quota::per_minute(100).unwrap().with_burst(20).unwrap();
//! let mut key = State::new(Algorithm::Gcra, &quota);
//! let first = key.decide(&quota, 0, 20);
//! assert!(first.allowed);
//! let second = key.decide(&quota, 0, 1);
//! assert!(!second.allowed);
//! // One emission interval (600 ms) later, one more request fits.
//! assert_eq!(second.retry_after, RetryAfter::After(600_000_000));
//! ```

mod algorithm;
pub mod algorithms;
mod compact;
mod decision;
mod lease;
mod multi;
mod quota;
mod state;
mod ticks;

pub use algorithm::{Algorithm, UnknownAlgorithm};
pub use algorithms::AlgorithmState;
pub use compact::{Bucket, Compact};
pub use decision::{Decision, RetryAfter};
pub use lease::{Lease, LeaseError};
pub use multi::{decide_all, force_all, lease_all, preview_all, refund_all};
pub use quota::{Limit, Quota, QuotaError};
pub use state::State;
