//! What every store crate of tollgate checks the same way, written once:
//!
//! - [`agreement`]: a store decides exactly like the core, on random traces
//!   of every operation, algorithm and layered policy;
//! - [`race`]: many clients sending at once at one key, counted, for the
//!   atomicity tests and the naive-versus-atomic examples.
//!
//! ```
//! use tollgate::{Algorithm, Limit, Operation, Quota, State};
//! use tollgate_testkit::agreement::core;
//!
//! // The reference a store's answer is compared with: two requests at
//! // once against 1 a second.
//! let limits = [Limit::new(Algorithm::Gcra, Quota::per_second(1).unwrap())];
//! let mut states = [State::new(Algorithm::Gcra, &limits[0].quota)];
//! let first = core(&mut states, &limits, Operation::Check(1), 0).unwrap();
//! let second = core(&mut states, &limits, Operation::Check(1), 0).unwrap();
//! assert!(first.decision.allowed && !second.decision.allowed);
//! assert_eq!(second.granted, 0);
//! ```

pub mod agreement;
pub mod race;
