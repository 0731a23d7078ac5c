//! `tollgate serve`: the rate-limit server (crate `tollgate-server`); this
//! module only maps flags to its options and waits for a signal.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use tollgate_cli::duration::parse_duration;
use tollgate_server::api::ApiToken;
use tollgate_server::config::Config;
use tollgate_server::listener::{ListenerLimits, Pace};
use tollgate_server::logs::{self, LogFormat};
use tollgate_server::server::{self, ProxyOptions, ServeOptions};
use tollgate_server::store::MemorySettings;

use crate::timeout::{parse_timeout, DEFAULT as DEFAULT_TIMEOUT};

const EXAMPLE: &str = "\
Example (limits.yaml is an envoyproxy/ratelimit descriptor file, or uses tollgate's extensions):

  $ cat limits.yaml
  domain: api
  descriptors:
    - key: user                 # each user: 100 per minute (fixed window)
      rate_limit: { unit: minute, requests_per_unit: 100 }
    - key: plan
      value: free               # free plan: token bucket, 30 per 90 s, bursts of 10
      rate_limit: { algorithm: token_bucket, period: 90s, requests_per_unit: 30, burst: 10 }

  $ tollgate serve --check limits.yaml       # validate, print each limit in words
  $ tollgate serve --config limits.yaml --store redis://127.0.0.1:6379
  $ curl -s localhost:8080/v1/check \\
      -d '{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"ada\"}]}]}'

Reverse proxy (the file's `http:` rules in front of a service, on port 8000):

  $ tollgate serve --config limits.yaml --upstream http://127.0.0.1:3000

Envoy: point its rate limit filter at the gRPC port (8081). The file is reloaded
when it changes and on SIGHUP; SIGTERM or Ctrl-C drains and exits. Every flag can
also be set by the environment variable shown with it.";

/// Flags of `tollgate serve`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = EXAMPLE)]
pub struct Args {
    /// The configuration file (YAML).
    #[arg(long, short, value_name = "FILE", env = "TOLLGATE_CONFIG")]
    config: Option<PathBuf>,
    /// Validate FILE, print what each limit means, and exit (non-zero on error).
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    check: Option<PathBuf>,
    /// The store: memory, redis://HOST:PORT, rediss://HOST:PORT, redis+cluster://HOST:PORT[,...],
    /// postgres://USER@HOST[:PORT]/DB.
    #[arg(
        long,
        value_name = "URL",
        default_value = "memory",
        env = "TOLLGATE_STORE",
        hide_env_values = true
    )]
    store: String,
    /// Prefix of the keys in a shared store.
    #[arg(
        long,
        value_name = "PREFIX",
        default_value = "tollgate:",
        env = "TOLLGATE_PREFIX"
    )]
    prefix: String,
    /// With --store memory: keys held at most per limit (a new key beyond it takes an idle
    /// one's place, or shares one budget with the others left out); each takes about 70 bytes
    /// plus its length. Over the file's `memory.max_keys`; 1000000 when neither is given.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), env = "TOLLGATE_MEMORY_MAX_KEYS")]
    memory_max_keys: Option<u64>,
    /// With --store memory: how often keys back to a full budget are forgotten. Over the
    /// file's `memory.sweep_every`; 10s when neither is given.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, env = "TOLLGATE_MEMORY_SWEEP_EVERY")]
    memory_sweep_every: Option<u64>,
    /// Distinct descriptor values that get a metric series of their own under
    /// `detailed_metric: true`; the values beyond are counted together as `PATH:other`.
    #[arg(
        long,
        value_name = "N",
        default_value_t = tollgate_server::metrics::DEFAULT_DETAILED_SERIES,
        env = "TOLLGATE_MAX_DETAILED_SERIES"
    )]
    max_detailed_series: usize,
    /// Address of Envoy's rate limit gRPC API.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "0.0.0.0:8081",
        env = "TOLLGATE_GRPC_LISTEN"
    )]
    grpc_listen: SocketAddr,
    /// Do not serve the gRPC API.
    #[arg(long, env = "TOLLGATE_NO_GRPC")]
    no_grpc: bool,
    /// Address of the HTTP JSON API, /healthz, /readyz and /metrics.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "0.0.0.0:8080",
        env = "TOLLGATE_HTTP_LISTEN"
    )]
    http_listen: SocketAddr,
    /// A file holding the bearer token that /v1/* and /metrics then need
    /// (`Authorization: Bearer TOKEN`); /healthz, /readyz and gRPC stay open.
    #[arg(long, value_name = "FILE", env = "TOLLGATE_HTTP_TOKEN_FILE")]
    http_token_file: Option<PathBuf>,
    /// Reverse proxy mode: put the file's `http` rules in front of this service (http://HOST:PORT).
    #[arg(long, value_name = "URL", env = "TOLLGATE_UPSTREAM")]
    upstream: Option<String>,
    /// Also serve a tiny upstream on ADDR (every request: 200 "ok"), to put the
    /// proxy in front of for a demonstration or a load test (`tollgate loadtest`).
    #[arg(long, value_name = "ADDR", env = "TOLLGATE_DEMO_UPSTREAM")]
    demo_upstream: Option<SocketAddr>,
    /// Address of the reverse proxy (with --upstream).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "0.0.0.0:8000",
        env = "TOLLGATE_PROXY_LISTEN"
    )]
    proxy_listen: SocketAddr,
    /// Time from forwarding a request (its upload included) to the upstream's response head (then 504).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration, env = "TOLLGATE_UPSTREAM_TIMEOUT")]
    upstream_timeout: u64,
    /// Do not reload the file when it changes (SIGHUP still reloads).
    #[arg(long, env = "TOLLGATE_NO_WATCH")]
    no_watch: bool,
    /// Time a client has to send a request's headers, from their first byte (then 408);
    /// on gRPC, from the accept to its first request (then GOAWAY).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_timeout, env = "TOLLGATE_HEADER_TIMEOUT")]
    header_timeout: u64,
    /// Time a keep-alive connection may wait for its next request (then closed quietly;
    /// on gRPC, a connection without a stream, closed with a GOAWAY).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_timeout, env = "TOLLGATE_IDLE_TIMEOUT")]
    idle_timeout: u64,
    /// Deadline of one store call (the library's default); past it, the limit's
    /// on_store_error answers.
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_TIMEOUT.as_str(), value_parser = parse_timeout, env = "TOLLGATE_STORE_TIMEOUT")]
    store_timeout: u64,
    /// Largest request line and headers, in bytes (larger: 431).
    #[arg(long, value_name = "BYTES", default_value_t = 16 * 1024, env = "TOLLGATE_MAX_HEADER_BYTES")]
    max_header_bytes: usize,
    /// Most header fields in a request (more: 431).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 64,
        env = "TOLLGATE_MAX_HEADERS"
    )]
    max_headers: usize,
    /// Largest request body, in bytes (larger: 413); unbounded when unset.
    #[arg(long, value_name = "BYTES", env = "TOLLGATE_MAX_BODY_BYTES")]
    max_body_bytes: Option<u64>,
    /// Time a request body may take to arrive, plus one second per --body-min-rate bytes
    /// received (slower: 408, closed); only time spent waiting for the client counts.
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = parse_timeout, env = "TOLLGATE_BODY_TIMEOUT")]
    body_timeout: u64,
    /// Bytes per second of request body that earn one more second of --body-timeout; 0 makes
    /// --body-timeout a plain deadline.
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = 500,
        env = "TOLLGATE_BODY_MIN_RATE"
    )]
    body_min_rate: u64,
    /// Most connections open at once per listener (more: 503; on gRPC, a GOAWAY).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 4096,
        env = "TOLLGATE_MAX_CONNECTIONS"
    )]
    max_connections: usize,
    /// Most gRPC calls at once on one HTTP/2 connection (its SETTINGS_MAX_CONCURRENT_STREAMS;
    /// clients queue or open another connection beyond it).
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..), env = "TOLLGATE_MAX_CONCURRENT_STREAMS")]
    max_concurrent_streams: u32,
    /// How long shutdown waits for requests in flight.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, env = "TOLLGATE_DRAIN_TIMEOUT")]
    drain_timeout: u64,
    /// Threads serving connections, each with its own event loop, a connection staying on the
    /// thread that accepted it; the default is one per CPU.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024), env = "TOLLGATE_WORKERS")]
    workers: Option<u16>,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "TOLLGATE_LOG_FORMAT")]
    log_format: LogFormat,
    /// Log filter, as RUST_LOG (`info`, `tollgate_server=debug`).
    #[arg(
        long,
        value_name = "FILTER",
        default_value = "info",
        env = "TOLLGATE_LOG"
    )]
    log: String,
}

/// Runs `tollgate serve`.
pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(path) = &args.check {
        return check(path);
    }
    logs::init(args.log_format, &args.log).map_err(anyhow::Error::msg)?;
    tollgate_server::metrics::bound_detailed_series(args.max_detailed_series);
    let options = ServeOptions {
        config: args.config,
        watch: !args.no_watch,
        store: args.store,
        prefix: args.prefix,
        store_timeout: Duration::from_nanos(args.store_timeout),
        memory: MemorySettings {
            max_keys: args
                .memory_max_keys
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            sweep_every: args.memory_sweep_every.map(Duration::from_nanos),
        },
        grpc: (!args.no_grpc).then_some(args.grpc_listen),
        http: Some(args.http_listen),
        http_token: args
            .http_token_file
            .as_deref()
            .map(ApiToken::from_file)
            .transpose()?,
        limits: ListenerLimits {
            header_timeout: Duration::from_nanos(args.header_timeout),
            idle_timeout: Duration::from_nanos(args.idle_timeout),
            max_header_bytes: args.max_header_bytes,
            max_headers: args.max_headers,
            max_body_bytes: args.max_body_bytes,
            body_pace: Pace {
                timeout: Duration::from_nanos(args.body_timeout),
                min_rate: args.body_min_rate,
            },
            max_connections: args.max_connections,
            max_concurrent_streams: args.max_concurrent_streams,
            drain: Duration::from_nanos(args.drain_timeout),
        },
        proxy: args.upstream.map(|upstream| ProxyOptions {
            listen: args.proxy_listen,
            upstream,
            timeout: Duration::from_nanos(args.upstream_timeout),
        }),
        workers: args.workers.map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            usize::from,
        ),
    };
    // The first worker: the other workers are threads of their own.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let demo = args.demo_upstream;
    runtime.block_on(async move {
        if let Some(addr) = demo {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (--demo-upstream)"))?;
            tracing::info!(%addr, "serving the demo upstream");
            tokio::spawn(tollgate_loadtest::demo::serve(listener));
        }
        server::serve_until_signal(options).await?;
        anyhow::Ok(())
    })
}

fn check(path: &std::path::Path) -> anyhow::Result<()> {
    let config = Config::load(path)?;
    for line in config.describe() {
        println!("{line}");
    }
    println!(
        "{}: OK ({} limits, {} HTTP rules)",
        path.display(),
        config.entries().len(),
        config.http_rules().len()
    );
    Ok(())
}
