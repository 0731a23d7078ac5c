//! One connection type for a single Redis server and a Redis Cluster, with
//! automatic reconnection in both (redis-rs `ConnectionManager` and cluster
//! client).

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, RedisResult, TlsCertificates, Value};

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
    /// [`CLUSTER_SCHEME`]), each attempt bounded by `timeout`; `call` is the
    /// deadline of each later call. `roots` (PEM) replace the system's
    /// certificate authorities for TLS.
    pub async fn connect(
        url: &str,
        roots: Option<Vec<u8>>,
        timeout: Duration,
        call: Duration,
    ) -> RedisResult<Self> {
        if let Some(nodes) = url.strip_prefix(CLUSTER_SCHEME) {
            let nodes: Vec<String> = nodes
                .split(',')
                .filter(|n| !n.is_empty())
                .map(|n| format!("redis://{n}"))
                .collect();
            // A node that does not answer (paused, overloaded) must not hold
            // up the others: the client reconnects and refreshes its slot
            // map holding a lock that every call waits for, so a connection
            // attempt gets a quarter of a call's deadline and a reply the
            // whole of it. The slots of that node then fail on their own.
            // One retry follows a MOVED or ASK redirection.
            let client = ClusterClient::builder(nodes)
                .connection_timeout(timeout.min(call) / 4)
                .response_timeout(call)
                .retries(1)
                .build()?;
            return Ok(Conn::Cluster(client.get_async_connection().await?));
        }
        let client = match roots {
            Some(root_cert) => {
                let certs = TlsCertificates {
                    client_tls: None,
                    root_cert: Some(root_cert),
                };
                redis::Client::build_with_tls(url, certs)?
            }
            None => redis::Client::open(url)?,
        };
        // One connection attempt per reconnection, no backoff: a call made
        // while nothing listens fails at once as refused (`Unavailable`)
        // instead of waiting out its deadline in retries, and the next call
        // tries again.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(0);
        Ok(Conn::Single(
            ConnectionManager::new_with_config(client, config).await?,
        ))
    }

    /// Runs `cmd` on the server owning `key` (its hash tag decides the slot).
    /// An error the server put in its reply is an `Err`, as on one server.
    pub async fn on_key(&mut self, cmd: &Cmd, key: &str) -> RedisResult<Value> {
        self.on_key_nested(cmd, key)
            .await
            .and_then(Value::extract_error)
    }

    /// Like [`Conn::on_key`], but errors inside an array reply stay in
    /// their place (a fold's calls fail one by one); only an error in place
    /// of the whole reply is an `Err`.
    pub async fn on_key_nested(&mut self, cmd: &Cmd, key: &str) -> RedisResult<Value> {
        let reply = match self {
            Conn::Single(c) => c.req_packed_command(cmd).await,
            Conn::Cluster(c) => {
                let route = Route::with_key(key, SlotAddr::Master);
                c.route_command(
                    cmd.clone(),
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                )
                .await
            }
        };
        match reply? {
            Value::ServerError(e) => Err(e.into()),
            value => Ok(value),
        }
    }

    /// Checks that one server answers and accepts the credentials (a
    /// missing password shows only at the first command). A cluster client
    /// has already talked to its nodes to learn the slots.
    pub async fn ping(&mut self) -> RedisResult<()> {
        match self {
            Conn::Single(c) => redis::cmd("PING").query_async(c).await,
            Conn::Cluster(_) => Ok(()),
        }
    }
}
