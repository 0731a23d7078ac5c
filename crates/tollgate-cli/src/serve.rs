//! `tollgate serve`: the rate-limit server (crate `tollgate-server`); this
//! module only maps flags to its options and waits for a signal.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use tollgate_cli::duration::parse_duration;
use tollgate_server::answers::{Answers, Counting, LimitHeaders};
use tollgate_server::api::ApiToken;
use tollgate_server::config::{DirectoryOptions, Source};
use tollgate_server::listener::{ListenerLimits, Pace};
use tollgate_server::logs::{self, LogFormat};
use tollgate_server::server::{self, ProxyOptions, ServeOptions};
use tollgate_server::store::MemorySettings;
use tollgate_server::top_shape::TopSettings;
use tollgate_server::{settings, store};

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
also be set by the environment variable shown with it.

envoyproxy/ratelimit's environment is read too (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY,
PORT, GRPC_PORT, REDIS_SOCKET_TYPE, REDIS_URL, LOG_LEVEL, ...) where no flag is given;
a setting tollgate cannot honour stops the start with its name (docs/SERVER.md,
\"Migrating from envoyproxy/ratelimit\").";

/// Flags of `tollgate serve`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = EXAMPLE)]
pub struct Args {
    /// The configuration file (YAML), or a directory of them (every file under it, one
    /// domain or more each; names starting with a dot skipped).
    #[arg(long, short, value_name = "FILE", env = "TOLLGATE_CONFIG")]
    config: Option<PathBuf>,
    /// Validate FILE (or a directory) as start and reload do, against the store --store names
    /// (without connecting), print what each limit means, and exit (non-zero on error).
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
    /// Keys each limit's heavy-hitter summary keeps per sub-window (/v1/top, /top): 1 to
    /// 10000. Over the file's `top.keys`; 100 when neither is given.
    #[arg(long, value_name = "N", env = "TOLLGATE_TOP_KEYS")]
    top_keys: Option<usize>,
    /// The length of one sub-window of the heavy-hitter summaries: 1s to 1h. Over the file's
    /// `top.sub_window`; 10s when neither is given.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, env = "TOLLGATE_TOP_SUB_WINDOW")]
    top_sub_window: Option<u64>,
    /// How many sub-windows the heavy-hitter summaries keep: 1 to 1440 (the longest window
    /// reported is their product). Over the file's `top.sub_windows`; 60 when neither is given.
    #[arg(long, value_name = "N", env = "TOLLGATE_TOP_SUB_WINDOWS")]
    top_sub_windows: Option<usize>,
    /// Values of each `detailed_metric: true` limit that get a metric series of their own:
    /// its current top ones (by hits over the last minute); the other hits are counted
    /// together as `PATH:other`.
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
    /// Address of the HTTP JSON API, the live page /top, /healthz, /readyz
    /// and /metrics.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "0.0.0.0:8080",
        env = "TOLLGATE_HTTP_LISTEN"
    )]
    http_listen: SocketAddr,
    /// A file holding the bearer token that /v1/* and /metrics then need
    /// (`Authorization: Bearer TOKEN`); /healthz, /readyz, /top (a page
    /// holding no data: open /top#token=TOKEN) and gRPC stay open.
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

    // envoyproxy/ratelimit's settings that change answers, under its own
    // environment variable names (docs/SERVER.md, "Decisions").
    /// Counting of the limits written in envoyproxy/ratelimit's form: `upstream` (every hit
    /// counted, refused ones too, as envoyproxy/ratelimit) or `tollgate` (refusals cost nothing).
    #[arg(long, value_enum, default_value_t = CountingArg::Upstream, env = "TOLLGATE_COUNTING")]
    counting: CountingArg,
    /// Answer OK to every request, each descriptor's status still telling its own verdict.
    #[arg(long, env = "SHADOW_MODE", value_parser = clap::builder::BoolishValueParser::new(), default_value_t = false)]
    shadow_mode: bool,
    /// When a descriptor of a request would go over its limit, charge only the descriptors that
    /// would go over, leaving the others as they were.
    #[arg(long, env = "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", value_parser = clap::builder::BoolishValueParser::new(), default_value_t = false)]
    stop_cache_key_increment_when_overlimit: bool,
    /// Share of a limit past which an admitted hit counts as near the limit (statistics).
    #[arg(long, value_name = "RATIO", default_value_t = 0.8, value_parser = parse_ratio, env = "NEAR_LIMIT_RATIO")]
    near_limit_ratio: f32,
    /// Add the limit, remaining and reset headers of the descriptor closest to its limit to
    /// every answer's response_headers_to_add.
    #[arg(long, env = "LIMIT_RESPONSE_HEADERS_ENABLED", value_parser = clap::builder::BoolishValueParser::new(), default_value_t = false)]
    limit_response_headers_enabled: bool,
    /// Name of the limit header (with --limit-response-headers-enabled).
    #[arg(
        long,
        value_name = "NAME",
        default_value = "RateLimit-Limit",
        env = "LIMIT_LIMIT_HEADER"
    )]
    limit_limit_header: String,
    /// Name of the remaining header (with --limit-response-headers-enabled).
    #[arg(
        long,
        value_name = "NAME",
        default_value = "RateLimit-Remaining",
        env = "LIMIT_REMAINING_HEADER"
    )]
    limit_remaining_header: String,
    /// Name of the reset header, in seconds (with --limit-response-headers-enabled).
    #[arg(
        long,
        value_name = "NAME",
        default_value = "RateLimit-Reset",
        env = "LIMIT_RESET_HEADER"
    )]
    limit_reset_header: String,
}

/// `--counting`: whose rules count hits.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum CountingArg {
    /// envoyproxy/ratelimit's.
    Upstream,
    /// tollgate's.
    Tollgate,
}

/// A share between 0 and 1 (`NEAR_LIMIT_RATIO`).
fn parse_ratio(text: &str) -> Result<f32, String> {
    match text.trim().parse::<f32>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!(
            "`{text}` is not a ratio between 0 and 1 (e.g. 0.8)"
        )),
    }
}

impl Args {
    /// The answer settings the flags give.
    fn answers(&self) -> Answers {
        Answers {
            counting: match self.counting {
                CountingArg::Upstream => Counting::Upstream,
                CountingArg::Tollgate => Counting::Tollgate,
            },
            stop_increment_when_over: self.stop_cache_key_increment_when_overlimit,
            global_shadow: self.shadow_mode,
            near_limit_ratio: self.near_limit_ratio,
            limit_headers: self.limit_response_headers_enabled.then(|| LimitHeaders {
                limit: self.limit_limit_header.clone(),
                remaining: self.limit_remaining_header.clone(),
                reset: self.limit_reset_header.clone(),
            }),
        }
    }
}

/// Runs `tollgate serve`; `matches` tell the flags given (on the command
/// line or in a `TOLLGATE_` variable) from those at their default, which
/// envoyproxy/ratelimit's variables replace.
pub fn run(mut args: Args, matches: Option<&clap::ArgMatches>) -> anyhow::Result<()> {
    if let Some(path) = &args.check {
        return check(path, &args.store);
    }
    let upstream = settings::read(|name| std::env::var(name).ok())?;
    let defaulted = |id: &str| {
        matches
            .and_then(|m| m.value_source(id))
            .map_or(true, |source| {
                source == clap::parser::ValueSource::DefaultValue
            })
    };
    let mut directory = DirectoryOptions::default();
    if defaulted("config") {
        if let Some(source) = upstream.config.clone() {
            args.config = Some(source.path);
            directory = source.directory;
        }
    }
    if let (true, Some(addr)) = (defaulted("http_listen"), upstream.http) {
        args.http_listen = addr;
    }
    if let (true, Some(addr)) = (defaulted("grpc_listen"), upstream.grpc) {
        args.grpc_listen = addr;
    }
    if let (true, Some(store)) = (defaulted("store"), upstream.store.clone()) {
        args.store = store;
        if let Some(roots) = &upstream.redis_ca_file {
            // Read by the TLS client in place of the system's roots, as
            // upstream's REDIS_TLS_CACERT replaces them.
            std::env::set_var("SSL_CERT_FILE", roots);
        }
    }
    if let (true, Some(prefix)) = (defaulted("prefix"), upstream.prefix.clone()) {
        args.prefix = prefix;
    }
    if let (true, Some(format)) = (defaulted("log_format"), upstream.log_format) {
        args.log_format = format;
    }
    if let (true, Some(filter)) = (defaulted("log"), upstream.log_filter.clone()) {
        args.log = filter;
    }
    logs::init(args.log_format, &args.log).map_err(anyhow::Error::msg)?;
    let answers = args.answers();
    for warning in &upstream.warnings {
        tracing::warn!("{warning}");
    }
    tollgate_server::metrics::bound_detailed_series(args.max_detailed_series);
    let options = ServeOptions {
        config: args.config,
        directory,
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
        top: TopSettings {
            keys: args.top_keys,
            sub_window: args.top_sub_window.map(Duration::from_nanos),
            sub_windows: args.top_sub_windows,
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
        health: upstream.health,
        metrics: upstream.metrics.clone(),
        proxy: args.upstream.map(|upstream| ProxyOptions {
            listen: args.proxy_listen,
            upstream,
            timeout: Duration::from_nanos(args.upstream_timeout),
        }),
        workers: args.workers.map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            usize::from,
        ),
        answers,
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

/// The validation of start and reload, without starting: the file or
/// directory parsed, then every policy checked against the store `--store`
/// names (without connecting to it).
fn check(path: &std::path::Path, store: &str) -> anyhow::Result<()> {
    let config = Source::new(path).load()?;
    config
        .check_store(|policy| store::validate_offline(store, policy))
        .map_err(|message| anyhow::anyhow!("{}: {message}", path.display()))?;
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: Args,
    }

    #[test]
    fn upstream_switches_give_the_answer_settings() {
        let defaults = Cli::try_parse_from(["serve"]).unwrap().serve.answers();
        assert_eq!(defaults, Answers::default());
        let cli = Cli::try_parse_from([
            "serve",
            "--counting",
            "tollgate",
            "--shadow-mode",
            "--stop-cache-key-increment-when-overlimit",
            "--near-limit-ratio",
            "0.5",
            "--limit-response-headers-enabled",
            "--limit-reset-header",
            "X-Reset",
        ])
        .unwrap();
        let answers = cli.serve.answers();
        assert_eq!(answers.counting, Counting::Tollgate);
        assert!(answers.global_shadow && answers.stop_increment_when_over);
        assert_eq!(answers.near_limit_ratio, 0.5);
        let headers = answers.limit_headers.unwrap();
        assert_eq!(
            (headers.limit.as_str(), headers.reset.as_str()),
            ("RateLimit-Limit", "X-Reset")
        );
    }

    #[test]
    fn a_near_limit_ratio_outside_0_to_1_is_refused() {
        let err = Cli::try_parse_from(["serve", "--near-limit-ratio", "1.5"])
            .err()
            .unwrap();
        assert!(err.to_string().contains("between 0 and 1"), "{err}");
    }
}
