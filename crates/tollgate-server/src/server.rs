//! Starting and stopping the server: the gRPC and HTTP listeners over one
//! engine, the file watcher, graceful shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tower::util::BoxCloneService;

use crate::config::{Config, ConfigError};
use crate::engine::Engine;
use crate::listener::{self, ListenerLimits};
use crate::proxy::{Proxy, ProxyError};
use crate::store::{self, AnyBackend, StoreError};
use crate::{api, grpc, metrics, reload};

/// What to serve, and where.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The configuration file; none serves no limits (every check is OK).
    pub config: Option<PathBuf>,
    /// Reload the file when it changes.
    pub watch: bool,
    /// The store URL (`memory`, `redis://...`).
    pub store: String,
    /// Key prefix in a shared store.
    pub prefix: String,
    /// Deadline of one store call ([`store::DEFAULT_STORE_TIMEOUT`]).
    pub store_timeout: std::time::Duration,
    /// Envoy's gRPC API; `None` to not serve it.
    pub grpc: Option<SocketAddr>,
    /// The HTTP JSON API, health and metrics; `None` to not serve it.
    pub http: Option<SocketAddr>,
    /// The bounds of every listener (gRPC's too, see [`listener::grpc`]).
    pub limits: ListenerLimits,
    /// Reverse proxy mode, if wanted.
    pub proxy: Option<ProxyOptions>,
}

/// Reverse proxy mode: where to listen, where to forward.
#[derive(Clone, Debug)]
pub struct ProxyOptions {
    /// The proxy's own address.
    pub listen: SocketAddr,
    /// `http://HOST:PORT` of the service behind.
    pub upstream: String,
    /// How long to wait for the upstream's response head (then 504).
    pub timeout: std::time::Duration,
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The configuration file.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The store.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The proxy mode.
    #[error("{0}")]
    Proxy(#[from] ProxyError),
    /// A listener could not bind.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// A started server.
pub struct Running {
    /// Where gRPC is served.
    pub grpc: Option<SocketAddr>,
    /// Where HTTP is served.
    pub http: Option<SocketAddr>,
    /// Where the proxy is served.
    pub proxy: Option<SocketAddr>,
    /// The engine, shared by every listener.
    pub engine: Arc<Engine<Arc<AnyBackend>>>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    drain: std::time::Duration,
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// Loads the configuration, connects the store and starts every listener.
pub async fn start(options: ServeOptions) -> Result<Running, ServeError> {
    metrics::handle();
    let config = match &options.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    metrics::config_load(true);
    let backend = store::connect(&options.store, &options.prefix, options.store_timeout).await?;
    let engine = Arc::new(Engine::new(config, Arc::new(backend)));
    let (stop, stopping) = watch::channel(false);
    let mut tasks = Vec::new();
    let mut running_grpc = None;
    if let Some(addr) = options.grpc {
        let listener = bind(addr).await?;
        running_grpc = listener.local_addr().ok();
        let service = grpc::RlsService::server(Arc::clone(&engine));
        tasks.push(tokio::spawn(listener::grpc::serve(
            listener,
            BoxCloneService::new(service),
            options.limits,
            stopping.clone(),
        )));
    }
    let mut running_http = None;
    if let Some(addr) = options.http {
        let listener = bind(addr).await?;
        running_http = listener.local_addr().ok();
        let router = api::router(Arc::clone(&engine));
        tasks.push(tokio::spawn(listener::serve(
            listener,
            router,
            options.limits,
            stopping.clone(),
        )));
    }
    let mut running_proxy = None;
    if let Some(proxy) = &options.proxy {
        let service = Proxy::new(Arc::clone(&engine), &proxy.upstream, proxy.timeout)?.service();
        let listener = bind(proxy.listen).await?;
        running_proxy = listener.local_addr().ok();
        tasks.push(tokio::spawn(listener::serve(
            listener,
            service,
            options.limits,
            stopping.clone(),
        )));
    }
    if let (true, Some(path)) = (options.watch, options.config.clone()) {
        match reload::watch_file(Arc::clone(&engine), path, stopping.clone()) {
            Ok(watching) => drop(tokio::spawn(watching)),
            Err(e) => tracing::error!(error = %e, "cannot watch the configuration file"),
        }
    }
    Ok(Running {
        grpc: running_grpc,
        http: running_http,
        proxy: running_proxy,
        engine,
        stop,
        tasks,
        drain: options.limits.drain,
    })
}

impl Running {
    /// Stops accepting, lets the requests in flight finish within the drain
    /// bound, and returns when every listener is closed.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let deadline = tokio::time::Instant::now() + self.drain;
        for task in self.tasks {
            let abort = task.abort_handle();
            if tokio::time::timeout_at(deadline, task).await.is_err() {
                tracing::warn!("a listener did not drain in time; closing it");
                abort.abort();
            }
        }
    }
}

/// Serves until SIGTERM or Ctrl-C, then drains and returns.
pub async fn serve_until_signal(options: ServeOptions) -> Result<(), ServeError> {
    let running = start(options).await?;
    tracing::info!(grpc = ?running.grpc, http = ?running.http, proxy = ?running.proxy, "serving");
    stop_signal().await;
    tracing::info!("shutting down: draining requests in flight");
    running.shutdown().await;
    Ok(())
}

/// SIGTERM or Ctrl-C.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
