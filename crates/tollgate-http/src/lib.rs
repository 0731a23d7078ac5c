//! tollgate-http: rate limiting for tower services (axum, hyper) over any
//! tollgate [`Backend`](tollgate::Backend).

mod admit;
mod answer;
mod body;
mod cost;
mod digest;
pub mod fields;
mod ip;
mod key;
mod layer;
mod matcher;
pub mod observe;
mod rule;
mod service;
mod switch;
mod view;

pub use answer::{problem_json, BodyWriter, Reason, Refusal};
pub use body::LimitBody;
pub use cost::{Cost, CostError, CostFn, Reconcile, ReportedCost};
pub use digest::{digest, digest_bytes};
pub use ip::{ClientIp, ForwardedHeader, IpPrefix};
pub use key::{HeaderKey, Key, KeyError, MAX_KEY_BYTES};
pub use layer::{BuildError, RateLimit, RateLimitBuilder};
pub use matcher::Matcher;
pub use rule::{Fallback, MissingKey, Mode, OnStoreError, Rule, StoreFailure};
pub use service::{RateLimitService, ResponseFuture};
pub use switch::KillSwitch;
pub use view::{Labels, PeerAddr, RequestView};
