//! Fault injection for the store layers of tollgate ([`tollgate::Resilient`],
//! [`tollgate::Batched`]) against real Redis servers started by the tests
//! (paused, killed and restarted through `tollgate_redis::harness`):
//!
//! - [`Proxy`]: a TCP proxy on 127.0.0.1 that forwards, delays every chunk,
//!   or accepts and swallows everything (a store that never answers);
//! - the `batch-worker` binary: one instance of a fleet sending a steady
//!   rate to one hot key through [`tollgate::Batched`], for the
//!   several-processes test and the measurements in `docs/PERFORMANCE.md`.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use std::time::Duration;
//! use tollgate_faults::{Fault, Proxy};
//!
//! let proxy = Proxy::start("127.0.0.1:6379".parse().unwrap()).await?;
//! proxy.set(Fault::Delay(Duration::from_millis(80)));
//! // connect a backend to proxy.url(): every reply now comes 80 ms later
//! proxy.set(Fault::BlackHole);
//! // nothing comes back at all
//! # Ok(()) }
//! ```

mod proxy;

pub use proxy::{Fault, Proxy};
