//! Redis and Redis Cluster backend for tollgate.
//!
//! Every call is one round trip: an `FCALL` of the `tollgate` Redis
//! Function library (`lua/tollgate.lua`, all seven algorithms behind one
//! entry point for a decision, a refund, a forced charge and a lease), or
//! the same Lua through `EVALSHA` on servers without Functions. The script
//! reads the server's clock (`TIME`), applies every limit of a policy
//! atomically, and sets a TTL equal to `reset_after` on each key it
//! charges, so idle keys vanish. A library lost to a restart or failover is
//! reloaded on the spot. On one server, decisions made while two calls are
//! in flight leave together as one call of the script, which decides each
//! as if sent alone ([`RedisConfig::fold`]).
//!
//! Decisions are those of `tollgate-core`: the same `allowed` and
//! `remaining`, and durations equal to the core's rounded up to the
//! microsecond, the resolution of the store's clock ([`exact`] explains how
//! the script stays exact with Lua's doubles, and which quotas it refuses).
//!
//! ```no_run
//! # async fn demo() -> Result<(), tollgate::BackendError> {
//! use tollgate::{Algorithm, Backend, BackendExt, Limit, Policy, Quota};
//! use tollgate_redis::RedisBackend;
//!
//! let policy = Policy::new(Limit::new(Algorithm::Gcra, Quota::per_second(10).unwrap()));
//! RedisBackend::validate(&policy)?; // before connecting, as `tollgate serve --check`
//! let redis = RedisBackend::connect("redis://127.0.0.1:6379").await?;
//! let policy = redis.prepare(&policy)?; // once, where the policy is set up
//! let decision = redis.check("user-1", &policy, 1).await?;
//! assert!(decision.allowed);
//! # Ok(()) }
//! ```
//!
//! Keys are `<prefix>{<key>}:<algorithm>:<limit>:<period_ns>:<burst>`; the
//! sliding log keeps one sorted set per key and limit (`:log`, a member per
//! request), and the time of its last refund (`:refund`). A sliding log's
//! running total of admitted cost must stay below 2^53 over the key's life
//! (it restarts when the key expires): 285 years at a million per second.

mod backend;
mod conn;
mod encoded;
pub mod exact;
mod fold;
pub mod harness;
mod keys;
mod redact;
mod script;

pub use backend::{
    RedisBackend, RedisConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_FOLD, DEFAULT_PREFIX,
    DEFAULT_REPLAY_TTL, DEFAULT_TIMEOUT,
};
pub use conn::CLUSTER_SCHEME;
pub use encoded::{encode_policy, EncodedPolicy};
pub use keys::{KeySpace, MAX_KEY_BYTES};
pub use redact::redact;
pub use script::{eval_script, ScriptMode, FOLD_FUNCTION, FUNCTION, LIBRARY};
pub use tollgate::Operation;
