//! tollgate: exact rate limiting for services.
//!
//! Re-exports the exact core ([`tollgate_core`]) and defines the one
//! abstraction every store implements, [`Backend`]: a store of per-key state
//! that applies a [`Policy`] atomically with its own clock.

mod backend;
mod policy;

pub use backend::{Backend, BackendError};
pub use policy::{Policy, PolicyError};
pub use tollgate_core::{
    decide_all, preview_all, Algorithm, Decision, Limit, Quota, QuotaError, RetryAfter, State,
};
