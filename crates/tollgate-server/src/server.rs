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

use tollgate::MonotonicClock;

use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch, Semaphore};
use tokio::task::JoinHandle;
use tonic::service::Routes;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};
use tonic_health::ServingStatus;
use tower::util::BoxCloneService;

use crate::config::{Config, ConfigError, DirectoryOptions, Source};
use crate::engine::{Engine, Provenance};
use crate::listener::{self, ListenerLimits, Role};
use crate::proxy::{Proxy, ProxyError};
use crate::store::{self, GuardedStore, StoreError};
use crate::top_shape::{TopSettings, TopShapeError};
use crate::{api, grpc, metrics, reload, upstream};

/// Time past the drain bound that shutdown waits for a worker thread.
const DRAIN_SLACK: std::time::Duration = std::time::Duration::from_secs(1);

/// The service name envoyproxy/ratelimit reports in the gRPC health service
/// (`grpc.health.v1.Health`), next to the whole server's `""`.
const GRPC_HEALTH_NAME: &str = "ratelimit";

/// What to serve, and where.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The configuration file, or a directory of them (see
    /// [`Source`]); none serves no limits (every check is OK).
    pub config: Option<PathBuf>,
    /// How a configuration directory is read and watched.
    pub directory: DirectoryOptions,
    /// Reload the configuration when it changes.
    pub watch: bool,
    /// The store URL (`memory`, `redis://...`).
    pub store: String,
    /// Key prefix in a shared store.
    pub prefix: String,
    /// Deadline of one store call ([`store::DEFAULT_STORE_TIMEOUT`]).
    pub store_timeout: std::time::Duration,
    /// The memory store's key bound and idle sweep (over the file's).
    pub memory: store::MemorySettings,
    /// The heavy-hitter summaries' shape (over the file's `top`).
    pub top: TopSettings,
    /// Envoy's gRPC API; `None` to not serve it.
    pub grpc: Option<SocketAddr>,
    /// The HTTP JSON API, health and metrics; `None` to not serve it.
    pub http: Option<SocketAddr>,
    /// The bearer token `/v1/*` and `/metrics` need; `None` leaves them
    /// open to whoever reaches `http` (a warning at start says so).
    pub http_token: Option<api::ApiToken>,
    /// The bounds of every listener (gRPC's too, see [`listener::grpc`]).
    pub limits: ListenerLimits,
    /// Reverse proxy mode, if wanted.
    pub proxy: Option<ProxyOptions>,
    /// What envoyproxy/ratelimit's `/healthcheck` checks.
    pub health: upstream::Health,
    /// A listener of its own for the Prometheus metrics, besides `/metrics`
    /// on the HTTP API (envoyproxy/ratelimit's `USE_PROMETHEUS`).
    pub metrics: Option<MetricsOptions>,
    /// Threads serving the listeners, the caller's runtime included (see
    /// the module's documentation); 0 counts as 1, which serves everything
    /// on the caller's runtime.
    pub workers: usize,
    /// How answers are computed (envoyproxy/ratelimit's by default).
    pub answers: crate::answers::Answers,
}

/// The metrics' own listener: where, and at which path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsOptions {
    /// The address.
    pub listen: SocketAddr,
    /// The path of the metrics (`/metrics`).
    pub path: String,
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
    /// An option out of its range.
    #[error("{0}")]
    Invalid(&'static str),
    /// The heavy-hitter summaries' shape, from the flags over the file.
    #[error("the top summaries (--top-* over the file's `top`): {0}")]
    Top(#[from] TopShapeError),
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
    health: upstream::Health,
    /// `grpc.health.v1.Health` on the gRPC listener, as envoyproxy/ratelimit.
    grpc_health: HealthServer<HealthService>,
    http_token: Option<api::ApiToken>,
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
            let routes = Routes::new(service).add_service(self.grpc_health.clone());
            tasks.push(tokio::spawn(listener::grpc::serve(
                TcpListener::from_std(socket)?,
                BoxCloneService::new(routes),
                self.limits,
                Arc::clone(&self.grpc_permits),
                self.stopping.clone(),
            )));
        }
        if let Some(socket) = sockets.http {
            tasks.push(tokio::spawn(listener::serve(
                TcpListener::from_std(socket)?,
                api::router(Arc::clone(&self.engine), self.http_token.clone()).merge(
                    upstream::router(
                        Arc::clone(&self.engine),
                        self.health,
                        self.http_token.clone(),
                    ),
                ),
                Role::Routes,
                self.limits,
                Arc::clone(&self.http_permits),
                self.stopping.clone(),
            )));
        }
        if let (Some(socket), Some(proxy)) = (sockets.proxy, proxy) {
            tasks.push(tokio::spawn(listener::serve(
                TcpListener::from_std(socket)?,
                proxy.service(),
                Role::Proxy,
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
    if options.limits.max_connections == 0 {
        return Err(ServeError::Invalid(
            "--max-connections must be at least 1: with 0, every connection would be refused",
        ));
    }
    let source = options.config.as_ref().map(|path| Source {
        path: path.clone(),
        directory: options.directory.clone(),
    });
    let config = match &source {
        Some(source) => source.load()?,
        None => Config::default(),
    };
    let top = options.top.or(config.top()).shape()?;
    metrics::config_load(true);
    if options.proxy.is_some() && config.http_rules().is_empty() {
        tracing::warn!("--upstream without any HTTP rule: every request is forwarded unlimited (add `http: rules:` to the configuration)");
    }
    // For the startup log, before the configuration moves into the engine.
    let config_name = source.as_ref().map_or_else(
        || "none (every check is OK)".to_string(),
        |s| s.path.display().to_string(),
    );
    let (limits, http_rules) = (config.entries().len(), config.http_rules().len());
    // Read at start: the store is not rebuilt on reload.
    let memory = options.memory.or(config.memory()).bounds();
    let backend = store::connect(
        &options.store,
        &options.prefix,
        options.store_timeout,
        memory,
    )
    .await?;
    if let Some(source) = &source {
        reload::check_store(source, &config, &backend)?;
    }
    let name = store::store_name(&options.store);
    let backend = GuardedStore::new(backend, name, options.store_timeout, config.store());
    let backend = Arc::new(backend);
    let provenance = Provenance {
        config_source: config_name.clone(),
        store_url: tollgate_redis::redact(&options.store),
        health: backend.clone(),
    };
    let engine = Engine::with_answers(config, Arc::clone(&backend), options.answers.clone())
        .with_top(top, MonotonicClock::new())
        .with_fallback(backend.clone())
        .with_provenance(provenance);
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
    if let (Some(addr), None) = (http_addr, &options.http_token) {
        if !addr.ip().is_loopback() {
            tracing::warn!(%addr, "the HTTP API's /v1/check and /metrics answer anyone who reaches this address; \
                set --http-token-file, or listen on 127.0.0.1 (docs/SERVER.md)");
        }
    }
    let proxy_listen = options.proxy.as_ref().map(|p| p.listen);
    let (proxy_addr, proxy) = bind_each(proxy_listen, workers).await?;
    let metrics_listener = match &options.metrics {
        Some(m) => Some(
            TcpListener::bind(m.listen)
                .await
                .map_err(|source| ServeError::Bind {
                    addr: m.listen,
                    source,
                })?,
        ),
        None => None,
    };
    let metrics_addr = metrics_listener.as_ref().and_then(|l| l.local_addr().ok());
    let (stop, stopping) = watch::channel(false);
    let sweeping = tokio::spawn({
        let (backend, stopping) = (Arc::clone(&backend), stopping.clone());
        async move { backend.sweep(stopping).await }
    });
    let permits = || Arc::new(Semaphore::new(options.limits.max_connections));
    let reporter = HealthReporter::new();
    reporter
        .set_service_status(GRPC_HEALTH_NAME, ServingStatus::Serving)
        .await;
    let grpc_health = HealthServer::new(HealthService::from_health_reporter(reporter.clone()));
    drop(tokio::spawn(not_serving_once_stopping(
        reporter,
        stopping.clone(),
    )));
    let shared = Shared {
        engine: Arc::clone(&engine),
        limits: options.limits,
        health: options.health,
        grpc_health,
        http_token: options.http_token.clone(),
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
    // One task on the first worker: a scrape every few seconds.
    if let (Some(m), Some(listener)) = (&options.metrics, metrics_listener) {
        tasks.push(tokio::spawn(listener::serve(
            listener,
            api::metrics_router(&m.path),
            Role::Routes,
            options.limits,
            permits(),
            stopping.clone(),
        )));
    }
    for (n, (sockets, proxy)) in each.enumerate() {
        threads.push(
            shared
                .thread(n + 1, sockets, proxy)
                .map_err(ServeError::Worker)?,
        );
    }
    drop(tokio::spawn(store::sweep_idle(
        Arc::clone(engine.backend()),
        memory.sweep_every,
        stopping.clone(),
    )));
    reload::spawn(Arc::clone(&engine), source, options.watch, stopping);
    tracing::info!(
        config = %config_name,
        limits,
        http_rules,
        store = %tollgate_redis::redact(&options.store),
        grpc = ?grpc_addr,
        http = ?http_addr,
        proxy = ?proxy_addr,
        metrics = ?metrics_addr,
        workers,
        "serving"
    );
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

/// Turns the gRPC health service to `NOT_SERVING` once shutdown starts, as
/// envoyproxy/ratelimit does on `SIGTERM`, so that a client's health check
/// moves its traffic elsewhere while the calls in flight drain.
async fn not_serving_once_stopping(reporter: HealthReporter, mut stopping: watch::Receiver<bool>) {
    listener::stopped(&mut stopping).await;
    for name in ["", GRPC_HEALTH_NAME] {
        reporter
            .set_service_status(name, ServingStatus::NotServing)
            .await;
    }
}
