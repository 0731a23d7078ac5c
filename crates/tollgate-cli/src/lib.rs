//! The engine behind the `tollgate` command, as a library so that benches
//! and other front ends can call it without spawning a process.

pub mod duration;
pub use tollgate_trace::escape;
pub mod output_file;
pub mod rule_args;
pub mod temp_cleanup;
pub use tollgate_trace::trace;
