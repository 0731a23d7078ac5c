//! Starting and stopping the server: the gRPC and HTTP listeners over one
//! engine, the file watcher, graceful shutdown.
//!
//! With [`ServeOptions::workers`] above one, each extra worker is a thread
//! with its own single-threaded runtime, accepting on every address (see
//! [`bind`]). A connection then lives on one thread from accept to close,
//! with no wake-up crossing threads, as in nginx's worker processes; the
//! caller's runtime is the first worker. The engine (configuration, limiter
//! state, store connection) and each address's connection bound are shared
//! by all.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch, Semaphore};
use tokio::task::JoinHandle;
use tower::util::BoxCloneService;

use crate::config::{Config, ConfigError};
use crate::engine::Engine;
use crate::listener::{self, ListenerLimits};
use crate::proxy::{Proxy, ProxyError};
use crate::store::{self, GuardedStore, StoreError};
use crate::{api, grpc, metrics, reload};

/// Time past the drain bound that shutdown waits for a worker thread.
const DRAIN_SLACK: std::time::Duration = std::time::Duration::from_secs(1);

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
    /// Threads serving the listeners, the caller's runtime included (see
    /// the module's documentation); 0 counts as 1, which serves everything
    /// on the caller's runtime.
    pub workers: usize,
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
    /// A worker's thread or runtime could not start.
    #[error("cannot start a worker: {0}")]
    Worker(std::io::Error),
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
    pub engine: Arc<Engine<Arc<GuardedStore>>>,
    stop: watch::Sender<bool>,
    /// The listeners on the caller's runtime.
    tasks: Vec<JoinHandle<()>>,
    /// One per extra worker thread, resolved when its listeners are closed.
    threads: Vec<oneshot::Receiver<()>>,
    /// Gives expired batched leases back until stopped.
    sweeping: JoinHandle<()>,
    drain: std::time::Duration,
}

/// A socket listening on `addr`, with a handle on it for each worker.
///
/// One socket rather than one per worker (`SO_REUSEPORT`): every worker's
/// event loop waits on it and the first one free accepts, so a busy worker
/// takes fewer new connections; and a second server started on the same
/// port fails to bind, as it should, instead of silently taking a share of
/// the connections.
async fn bind(addr: SocketAddr, workers: usize) -> Result<Vec<std::net::TcpListener>, ServeError> {
    let error = |source| ServeError::Bind { addr, source };
    let listener = TcpListener::bind(addr)
        .await
        .and_then(TcpListener::into_std)
        .map_err(error)?;
    let mut handles = Vec::with_capacity(workers);
    for _ in 1..workers {
        handles.push(listener.try_clone().map_err(error)?);
    }
    handles.push(listener);
    Ok(handles)
}

/// One worker's handles on the listening sockets, one per address served.
struct Sockets {
    grpc: Option<std::net::TcpListener>,
    http: Option<std::net::TcpListener>,
    proxy: Option<std::net::TcpListener>,
}

/// What every worker shares.
#[derive(Clone)]
struct Shared {
    engine: Arc<Engine<Arc<GuardedStore>>>,
    limits: ListenerLimits,
    stopping: watch::Receiver<bool>,
    /// Each address's connections, counted over all workers.
    grpc_permits: Arc<Semaphore>,
    http_permits: Arc<Semaphore>,
    proxy_permits: Arc<Semaphore>,
}

impl Shared {
    /// Serves `sockets` on the current runtime: one task per address.
    /// `proxy` is this worker's own (its upstream connections are driven
    /// by this runtime).
    fn spawn(
        &self,
        sockets: Sockets,
        proxy: Option<Arc<Proxy<Arc<GuardedStore>>>>,
    ) -> std::io::Result<Vec<JoinHandle<()>>> {
        let mut tasks = Vec::new();
        if let Some(socket) = sockets.grpc {
            let service = grpc::RlsService::server(Arc::clone(&self.engine));
            tasks.push(tokio::spawn(listener::grpc::serve(
                TcpListener::from_std(socket)?,
                BoxCloneService::new(service),
                self.limits,
                Arc::clone(&self.grpc_permits),
                self.stopping.clone(),
            )));
        }
        if let Some(socket) = sockets.http {
            tasks.push(tokio::spawn(listener::serve(
                TcpListener::from_std(socket)?,
                api::router(Arc::clone(&self.engine)),
                self.limits,
                Arc::clone(&self.http_permits),
                self.stopping.clone(),
            )));
        }
        if let (Some(socket), Some(proxy)) = (sockets.proxy, proxy) {
            tasks.push(tokio::spawn(listener::serve(
                TcpListener::from_std(socket)?,
                proxy.service(),
                self.limits,
                Arc::clone(&self.proxy_permits),
                self.stopping.clone(),
            )));
        }
        Ok(tasks)
    }

    /// Starts a worker thread serving `sockets` until shutdown has drained
    /// them; the receiver resolves then.
    fn thread(
        &self,
        n: usize,
        sockets: Sockets,
        proxy: Option<Arc<Proxy<Arc<GuardedStore>>>>,
    ) -> std::io::Result<oneshot::Receiver<()>> {
        let (done, finished) = oneshot::channel();
        let shared = self.clone();
        std::thread::Builder::new()
            .name(format!("tollgate-worker-{n}"))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => return tracing::error!(error = %e, "cannot start a worker's runtime"),
                };
                runtime.block_on(async move {
                    match shared.spawn(sockets, proxy) {
                        Ok(tasks) => {
                            for task in tasks {
                                let _ = task.await;
                            }
                        }
                        Err(e) => tracing::error!(error = %e, "a worker cannot listen"),
                    }
                });
                let _ = done.send(());
            })?;
        Ok(finished)
    }
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
    let name = store::store_name(&options.store);
    let backend = GuardedStore::new(backend, name, options.store_timeout, config.store());
    let backend = Arc::new(backend);
    let engine = Engine::new(config, Arc::clone(&backend)).with_fallback(backend.clone());
    let engine = Arc::new(engine);
    let workers = options.workers.max(1);
    // One proxy per worker: its upstream connections are driven by the
    // runtime of the requests sent on them. Built before anything listens,
    // so that rules that do not build fail the start.
    let proxies = (0..workers)
        .map(|_| {
            options
                .proxy
                .as_ref()
                .map(|p| Proxy::new(Arc::clone(&engine), &p.upstream, p.timeout))
                .transpose()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (grpc_addr, grpc) = bind_each(options.grpc, workers).await?;
    let (http_addr, http) = bind_each(options.http, workers).await?;
    let proxy_listen = options.proxy.as_ref().map(|p| p.listen);
    let (proxy_addr, proxy) = bind_each(proxy_listen, workers).await?;
    let (stop, stopping) = watch::channel(false);
    let sweeping = tokio::spawn({
        let (backend, stopping) = (Arc::clone(&backend), stopping.clone());
        async move { backend.sweep(stopping).await }
    });
    let permits = || Arc::new(Semaphore::new(options.limits.max_connections));
    let shared = Shared {
        engine: Arc::clone(&engine),
        limits: options.limits,
        stopping: stopping.clone(),
        grpc_permits: permits(),
        http_permits: permits(),
        proxy_permits: permits(),
    };
    let mut each = grpc
        .into_iter()
        .zip(http)
        .zip(proxy)
        .map(|((grpc, http), proxy)| Sockets { grpc, http, proxy })
        .zip(proxies);
    let mut tasks = Vec::new();
    let mut threads = Vec::new();
    if let Some((sockets, proxy)) = each.next() {
        tasks = shared.spawn(sockets, proxy).map_err(ServeError::Worker)?;
    }
    for (n, (sockets, proxy)) in each.enumerate() {
        threads.push(
            shared
                .thread(n + 1, sockets, proxy)
                .map_err(ServeError::Worker)?,
        );
    }
    if let (true, Some(path)) = (options.watch, options.config.clone()) {
        match reload::watch_file(Arc::clone(&engine), path, stopping) {
            Ok(watching) => drop(tokio::spawn(watching)),
            Err(e) => tracing::error!(error = %e, "cannot watch the configuration file"),
        }
    }
    Ok(Running {
        grpc: grpc_addr,
        http: http_addr,
        proxy: proxy_addr,
        engine,
        stop,
        tasks,
        threads,
        sweeping,
        drain: options.limits.drain,
    })
}

/// [`bind`] for an address that may be absent: where it is bound, and one
/// socket per worker (all `None` when absent).
async fn bind_each(
    addr: Option<SocketAddr>,
    workers: usize,
) -> Result<(Option<SocketAddr>, Vec<Option<std::net::TcpListener>>), ServeError> {
    let Some(addr) = addr else {
        return Ok((None, (0..workers).map(|_| None).collect()));
    };
    let sockets = bind(addr, workers).await?;
    let bound = sockets.first().and_then(|s| s.local_addr().ok());
    Ok((bound, sockets.into_iter().map(Some).collect()))
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
        // A worker's listeners give up at the drain bound themselves; the
        // slack covers their last closes.
        for thread in self.threads {
            if tokio::time::timeout_at(deadline + DRAIN_SLACK, thread)
                .await
                .is_err()
            {
                tracing::warn!("a worker did not drain in time");
            }
        }
        // Unspent leased units go back to the store once nothing spends
        // them any more.
        let _ = self.sweeping.await;
        let giving_back = self.engine.backend().give_back_leases();
        let _ = tokio::time::timeout_at(deadline + DRAIN_SLACK, giving_back).await;
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
