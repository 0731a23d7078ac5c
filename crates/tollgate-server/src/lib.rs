//! tollgate-server: the library behind `tollgate serve`.
//!
//! - [`config`]: the YAML file (envoyproxy/ratelimit descriptors as they
//!   are, plus tollgate's extensions and the proxy mode's HTTP rules);

pub mod answers;
pub mod api;
pub mod config;
pub mod engine;
pub mod grpc;
pub mod listener;
pub mod logs;
pub mod metrics;
pub mod proxy;
pub mod reload;
mod secret;
pub mod server;
pub mod settings;
pub mod store;
pub mod top_shape;
pub mod upstream;
