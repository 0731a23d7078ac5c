//! The CSV trace of requests that `tollgate replay` decides and
//! `tollgate what-if` can read, with its exact replay engine ([`trace`]),
//! and the escaping every message quoting input goes through ([`escape`]).
//!
//! A library of its own so that the command line and the what-if engine
//! (`tollgate-whatif`) share one parser and one decision path.

#![warn(missing_docs)]

pub mod escape;
pub mod trace;
