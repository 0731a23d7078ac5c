//! One connection type for a single Redis server and a Redis Cluster, with
//! automatic reconnection in both (redis-rs `ConnectionManager` and cluster
//! client).

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, RedisResult, Value};

/// The URL scheme that selects cluster mode; the rest lists seed nodes
/// separated by commas (`redis+cluster://h1:7000,h2:7001`).
pub const CLUSTER_SCHEME: &str = "redis+cluster://";

/// A connection to one server or to a cluster.
///
/// Cloned for every call (both variants share their connections behind an
/// `Arc`), so the size difference is not worth a box's allocation per clone.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub enum Conn {
    /// A single server (or a primary behind a proxy).
    Single(ConnectionManager),
    /// A Redis Cluster: commands go to the primary owning their key's slot.
    Cluster(ClusterConnection),
}

impl Conn {
    /// Connects to `url` (`redis://`, `rediss://`, `unix://` or
    /// [`CLUSTER_SCHEME`]), each attempt bounded by `timeout`.
    pub async fn connect(url: &str, timeout: Duration) -> RedisResult<Self> {
        if let Some(nodes) = url.strip_prefix(CLUSTER_SCHEME) {
            let nodes: Vec<String> = nodes
                .split(',')
                .filter(|n| !n.is_empty())
                .map(|n| format!("redis://{n}"))
                .collect();
            let client = ClusterClient::builder(nodes)
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .retries(2)
                .min_retry_wait(5)
                .max_retry_wait(50)
                .build()?;
            return Ok(Conn::Cluster(client.get_async_connection().await?));
        }
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(50));
        Ok(Conn::Single(
            ConnectionManager::new_with_config(client, config).await?,
        ))
    }

    /// Runs `cmd` on the server owning `key` (its hash tag decides the slot).
    /// An error the server put in its reply is an `Err`, as on one server.
    pub async fn on_key(&mut self, cmd: &Cmd, key: &str) -> RedisResult<Value> {
        let reply = match self {
            Conn::Single(c) => cmd.query_async(c).await,
            Conn::Cluster(c) => {
                let route = Route::with_key(key, SlotAddr::Master);
                c.route_command(
                    cmd.clone(),
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                )
                .await
            }
        };
        reply.and_then(Value::extract_error)
    }

    /// Runs a keyless administrative command (`FUNCTION LOAD`, `SCRIPT
    /// LOAD`); the cluster client sends those to every primary (or node) and
    /// fails unless all succeed.
    pub async fn everywhere(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        let reply = match self {
            Conn::Single(c) => cmd.query_async(c).await,
            Conn::Cluster(c) => cmd.query_async(c).await,
        };
        reply.and_then(Value::extract_error)
    }
}
