//! Shared by the Redis tests: servers started on free ports, fresh key
//! prefixes, and the core's decision as the store should report it.

#![allow(dead_code)] // each test binary uses a different part

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tollgate_core::{Decision, RetryAfter};
use tollgate_redis::harness::{skip_requested, RedisCluster, RedisServer};
use tollgate_redis::{RedisBackend, RedisConfig};

/// A fresh server, or `None` when the Redis tests are skipped on purpose.
/// Fails (naming the package to install) when `redis-server` is missing.
pub fn server() -> Option<RedisServer> {
    if skip_requested() {
        return None;
    }
    Some(RedisServer::start().unwrap_or_else(|e| panic!("{e}")))
}

/// A fresh three-primary cluster, or `None` when skipped on purpose.
pub fn cluster() -> Option<RedisCluster> {
    if skip_requested() {
        return None;
    }
    Some(RedisCluster::start().unwrap_or_else(|e| panic!("{e}")))
}

/// A prefix no other test in this process uses.
pub fn fresh_prefix() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("t{}:", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A backend with a generous deadline (the machine may be busy compiling),
/// under a fresh prefix.
pub async fn backend(url: &str) -> RedisBackend {
    config(url).connect().await.expect("connect")
}

pub fn config(url: &str) -> RedisConfig {
    RedisConfig::new(url)
        .prefix(fresh_prefix())
        .timeout(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(10))
}

/// `ns` rounded up to a whole microsecond.
pub fn ceil_us(ns: u64) -> u64 {
    ns.div_ceil(1000) * 1000
}

/// The core's decision as a store with a microsecond clock reports it:
/// every duration rounded up to the microsecond.
pub fn at_store_resolution(d: Decision) -> Decision {
    Decision {
        retry_after: match d.retry_after {
            RetryAfter::After(ns) => RetryAfter::After(ceil_us(ns)),
            other => other,
        },
        reset_after: ceil_us(d.reset_after),
        delay: ceil_us(d.delay),
        ..d
    }
}
