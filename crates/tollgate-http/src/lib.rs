//! tollgate-http: rate limiting for tower services (axum 0.8, plain hyper)
//! over any tollgate [`Backend`](tollgate::Backend): memory, Redis, ...
//!
//! ```
//! use axum::{routing::get, Router};
//! use tollgate::{Algorithm, Limit, MemoryBackend, Quota};
//! use tollgate_http::{RateLimit, Rule};
//!
//! let per_ip = Rule::new("per-ip", Limit::new(Algorithm::Gcra, Quota::per_minute(100)?));
//! let limit = RateLimit::builder(MemoryBackend::new()).rule(per_ip).build()?;
//! let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(limit);
//! // axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>()).await?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Serve with `into_make_service_with_connect_info` (or insert a
//! [`PeerAddr`] per request under plain hyper): without the peer's address,
//! a key on the client's address is missing and the request is refused.
//!
//! # How a request is decided
//!
//! 1. Every [`Rule`] whose [`Matcher`] selects the request applies, in the
//!    order the rules were added. For each, its [`Key`] and [`Cost`] are read
//!    from a [`RequestView`]: a missing key is refused with a 400 (or skips
//!    the rule, by [`MissingKey`]); a key over [`MAX_KEY_BYTES`] or with
//!    control bytes, or an unreadable cost, is a 400 (411 for a missing
//!    `Content-Length`). Nothing is charged for these. A cost the client
//!    chooses (a header, the body's length) is at least the rule's
//!    [`min_cost`](Rule::min_cost), 1 by default: never a free pass.
//! 2. Each rule is decided with one atomic store call. An enforcing rule that
//!    denies ends the request: every charge already made for it is refunded
//!    (see [the guarantee](#all-or-nothing)), and the client gets a 429 with
//!    `Retry-After`, `RateLimit-Policy` and `RateLimit` ([`fields`]), or a
//!    413 if the cost can never fit. A [`Mode::Shadow`] rule (or every rule,
//!    while the [`KillSwitch`] is on) only counts and logs its denials.
//! 3. A store failure follows the rule's [`OnStoreError`]: open (pass,
//!    counted and logged), closed (503 with `Retry-After`), or a
//!    [`StoreFailure`] of your own, the place for a local fallback.
//! 4. A `leaky_queue` rule's delay is waited on a timer before the service
//!    is called ([`RateLimitService`] says what a client that leaves gets).
//! 5. The response gets the fields of every enforcing rule, and a rule with
//!    [`Reconcile`] settles its estimate with the cost the response reports.
//!
//! # All or nothing
//!
//! The same for every store, memory or Redis: a refused request leaves each
//! rule's key as if it had never come (the store's `refund`: the exact
//! inverse of the charge, capped at a fresh key), unless the store fails
//! between the charge and the refund; that charge then stands and
//! `tollgate_http_settle_errors_total` counts it. Rules after the denying
//! one are not asked. The charges are separate store calls, so concurrent
//! requests may briefly see a charge that is later refunded.
//!
//! # Reconciled costs
//!
//! When the real cost is known only from the response (LLM tokens), charge
//! an estimate ([`Cost`]) and set [`Reconcile`]: the handler reports the
//! cost ([`ReportedCost`] or a header), and the layer refunds the
//! difference or force-charges the extra. A forced charge may put the key
//! into debt; its next requests are denied until the debt is repaid, so the
//! limit holds over time, exceeded at any moment by at most one request's
//! underestimate.
//!
//! # Who is being limited
//!
//! Every rule counts its keys' admitted, refused and shadow-refused hits in
//! a bounded heavy-hitter summary (Space-Saving over 10 s sub-windows,
//! 100 keys each by default: [`RateLimitBuilder::top`]; the algorithm and
//! its error bound are in [`tollgate::top`]; off with
//! [`RateLimitBuilder::summaries`]). [`RateLimit::top_service`]
//! answers them as JSON ([`top`]: per rule, the totals and the busiest
//! keys of the last minute and ten minutes, with refusal ratios and how far
//! over the limit each runs); mount it behind your own authentication, as
//! it names your clients (header keys appear as their digests).
//! [`RateLimit::top_page_service`] is a live page over it ([`TopPage`]:
//! charts and tables, no asset from elsewhere), which holds no data itself:
//!
//!
//! ```
//! # use axum::{routing::get, Router};
//! # use tollgate::{Algorithm, Limit, MemoryBackend, Quota};
//! # use tollgate_http::{RateLimit, Rule};
//! # let per_ip = Rule::new("per-ip", Limit::new(Algorithm::Gcra, Quota::per_minute(100)?));
//! let limit = RateLimit::builder(MemoryBackend::new()).rule(per_ip).build()?;
//! let admin: Router = Router::new()
//!     .route_service("/v1/top", limit.top_service())
//!     .route_service("/top", limit.top_page_service());
//! let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(limit);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

mod admit;
mod answer;
mod body;
pub mod client;
mod cost;
mod digest;
pub mod fields;
mod ip;
mod key;
mod last_answer;
mod layer;
pub mod learn;
mod matcher;
pub mod observe;
mod policies;
mod routes;
mod rule;
mod scratch;
mod service;
mod switch;
pub mod top;
mod view;

pub use answer::{problem_json, BodyWriter, Reason, Refusal};
pub use body::LimitBody;
pub use cost::{Cost, CostError, CostFn, Reconcile, ReportedCost};
pub use digest::{digest, digest_bytes};
pub use ip::{parse_hop, push_ipv4, ClientIp, ForwardedHeader, IpPrefix};
pub use key::{HeaderKey, Key, KeyError, MAX_KEY_BYTES};
pub use layer::{BuildError, RateLimit, RateLimitBuilder};
pub use matcher::Matcher;
pub use routes::{RouteError, Routes};
pub use rule::{Fallback, MissingKey, Mode, OnStoreError, Rule, StoreFailure};
pub use scratch::header_value;
pub use service::{RateLimitService, ResponseFuture};
pub use switch::KillSwitch;
pub use top::{TopPage, TopService};
pub use view::{Labels, PeerAddr, RequestView};
