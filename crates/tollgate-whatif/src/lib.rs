//! `tollgate what-if`: decide candidate rate limits over your own access
//! logs before enforcing them.
//!
//! A log (nginx/Apache combined, any nginx-style `log_format`, Envoy JSON,
//! or `tollgate replay`'s CSV trace; gzip or not) is streamed once; each
//! request's key is derived by the HTTP layer's own code
//! ([`tollgate_http::Key`] over a [`tollgate_http::RequestView`]), and every
//! candidate policy (the rules of a `tollgate serve` configuration file, or
//! a sweep of one algorithm's limit and burst) decides it with the exact
//! core, in parallel by key. The [`report::Report`] says, per policy, whom
//! it would refuse and how often.
//!
//! ```
//! use tollgate_core::Algorithm;
//! use tollgate_http::{ClientIp, Key, Routes};
//! use tollgate_whatif::{engine, format::FormatName, policy::Candidates, report::Report};
//!
//! let log = "\
//! 192.0.2.1 - - [02/Nov/2026:08:00:00 +0000] \"GET /a/1 HTTP/1.1\" 200 5 \"-\" \"curl\"
//! 192.0.2.1 - - [02/Nov/2026:08:00:00 +0000] \"GET /a/2 HTTP/1.1\" 200 5 \"-\" \"curl\"
//! 192.0.2.1 - - [02/Nov/2026:08:00:00 +0000] \"GET /a/3 HTTP/1.1\" 200 5 \"-\" \"curl\"
//! ";
//! let candidates = Candidates::sweep(Algorithm::Gcra, 60_000_000_000, &[60], &[1, 2], Key::ip())?;
//! let options = engine::Options {
//!     format: FormatName::parse("combined")?,
//!     client_ip: ClientIp::socket(),
//!     routes: Routes::default(),
//!     strict: false,
//!     workers: 2,
//! };
//! let outcome = engine::run(log.as_bytes(), &candidates, &options, &mut || {})?;
//! let report = Report::new(&candidates, &outcome, 0.001);
//! // One a second, bursts of 1: the second and third requests are refused;
//! // bursts of 2: only the third.
//! assert_eq!(report.policies[0].refused, 2);
//! assert_eq!(report.policies[1].refused, 1);
//! assert_eq!(report.policies[1].by_route[0].name, "/a/{id}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod engine;
pub mod fields;
pub mod format;
pub mod input;
pub mod keys;
pub mod policy;
pub mod report;
pub mod sample;
pub mod time;
