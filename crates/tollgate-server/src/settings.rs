//! envoyproxy/ratelimit's environment variables (its `settings.go`), read
//! into what `tollgate serve` takes, so that a deployment keeps its
//! environment and changes only the image.
//!
//! Every variable that upstream reads is either mapped (listeners, logs,
//! the runtime directory, Redis, the key prefix, health checks), accepted
//! with a logged warning where tollgate has no equivalent and doing
//! without it changes no decision (the debug port, statsd's address,
//! connection pools, key expiry jitter), handled elsewhere (the answer
//! switches `SHADOW_MODE`, `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`,
//! `NEAR_LIMIT_RATIO`, `LIMIT_RESPONSE_HEADERS_ENABLED` and `LIMIT_*_HEADER`),
//! or refused with a message naming it
//! (TLS on gRPC, sentinel, memcache, xDS, statsd itself...). Nothing set is
//! ignored in silence. An empty value counts as unset.
//!
//! ```
//! use tollgate_server::settings;
//!
//! let env = |name: &str| match name {
//!     "PORT" => Some("9080".to_string()),
//!     "REDIS_SOCKET_TYPE" => Some("tcp".to_string()),
//!     "REDIS_URL" => Some("redis.internal:6379".to_string()),
//!     "REDIS_AUTH" => Some("s3cret".to_string()),
//!     "RUNTIME_ROOT" => Some("/data".to_string()),
//!     "RUNTIME_SUBDIRECTORY" => Some("ratelimit".to_string()),
//!     _ => None,
//! };
//! let read = settings::read(env)?;
//! assert_eq!(read.http.unwrap().port(), 9080);
//! assert_eq!(read.store.as_deref(), Some("redis://:s3cret@redis.internal:6379"));
//! assert_eq!(read.config.unwrap().path, std::path::Path::new("/data/ratelimit/config"));
//! # Ok::<(), settings::SettingsError>(())
//! ```

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use crate::config::{DirectoryOptions, Source};
use crate::logs::LogFormat;
use crate::server::MetricsOptions;
use crate::upstream::Health;

/// Accepted and without effect, each with why doing without it changes no
/// decision.
const NO_EFFECT: &[(&str, &str)] = &[
    (
        "DEBUG_HOST",
        "tollgate has no debug listener; /metrics, /readyz and /healthz are on PORT",
    ),
    (
        "DEBUG_PORT",
        "tollgate has no debug listener; /metrics, /readyz and /healthz are on PORT",
    ),
    (
        "GRPC_MAX_CONNECTION_AGE",
        "gRPC connections are not aged out",
    ),
    (
        "GRPC_MAX_CONNECTION_AGE_GRACE",
        "gRPC connections are not aged out",
    ),
    (
        "GRPC_SERVER_TLS_CERT",
        "it applies with GRPC_SERVER_USE_TLS only",
    ),
    (
        "GRPC_SERVER_TLS_KEY",
        "it applies with GRPC_SERVER_USE_TLS only",
    ),
    (
        "GRPC_CLIENT_TLS_CACERT",
        "it applies with GRPC_SERVER_USE_TLS only",
    ),
    (
        "GRPC_CLIENT_TLS_SAN",
        "it applies with GRPC_SERVER_USE_TLS only",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "tollgate's keys expire with their own window",
    ),
    (
        "LOCAL_CACHE_SIZE_IN_BYTES",
        "there is no local over-limit cache: every decision asks the store",
    ),
    (
        "REDIS_POOL_SIZE",
        "calls share one multiplexed connection per store",
    ),
    (
        "REDIS_PIPELINE_WINDOW",
        "calls are pipelined on the multiplexed connection",
    ),
    (
        "REDIS_PIPELINE_LIMIT",
        "calls are pipelined on the multiplexed connection",
    ),
    ("STATSD_HOST", "tollgate sends no statsd"),
    ("STATSD_PORT", "tollgate sends no statsd"),
    ("STATS_FLUSH_INTERVAL", "tollgate sends no statsd"),
    ("USE_DOG_STATSD", "tollgate sends no statsd"),
    ("USE_DOG_STATSD_MOGRIFIERS", "tollgate sends no statsd"),
    (
        "EXTRA_TAGS",
        "tags are not added to /metrics; add them with Prometheus relabelling",
    ),
    ("DISABLE_STATS", "/metrics is served anyway"),
    (
        "PROMETHEUS_MAPPER_YAML",
        "the metric names are upstream's default mapping, fixed",
    ),
    (
        "FORCE_START_WITHOUT_INITIAL_CONFIG",
        "it applies to xDS only",
    ),
    ("CONFIG_GRPC_XDS_NODE_ID", "it applies to xDS only"),
    ("CONFIG_GRPC_XDS_NODE_METADATA", "it applies to xDS only"),
    ("CONFIG_GRPC_XDS_SERVER_URL", "it applies to xDS only"),
    (
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        "it applies to xDS only",
    ),
    (
        "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
        "it applies to xDS only",
    ),
    ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "it applies to xDS only"),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "it applies to xDS only"),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "it applies to xDS only"),
    (
        "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
        "it applies to xDS only",
    ),
    ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "it applies to xDS only"),
    (
        "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
        "it applies to xDS only",
    ),
    ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "it applies to xDS only"),
    ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "it applies to xDS only"),
    ("XDS_CLIENT_BACKOFF_JITTER", "it applies to xDS only"),
    (
        "MEMCACHE_HOST_PORT",
        "it applies to BACKEND_TYPE=memcache only",
    ),
    ("MEMCACHE_SRV", "it applies to BACKEND_TYPE=memcache only"),
    (
        "MEMCACHE_SRV_REFRESH",
        "it applies to BACKEND_TYPE=memcache only",
    ),
    (
        "MEMCACHE_MAX_IDLE_CONNS",
        "it applies to BACKEND_TYPE=memcache only",
    ),
    ("MEMCACHE_TLS", "it applies to BACKEND_TYPE=memcache only"),
    (
        "MEMCACHE_TLS_CLIENT_CERT",
        "it applies to BACKEND_TYPE=memcache only",
    ),
    (
        "MEMCACHE_TLS_CLIENT_KEY",
        "it applies to BACKEND_TYPE=memcache only",
    ),
    (
        "MEMCACHE_TLS_CACERT",
        "it applies to BACKEND_TYPE=memcache only",
    ),
    (
        "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
        "it applies to BACKEND_TYPE=memcache only",
    ),
    (
        "TRACING_ENABLED",
        "tollgate exports no OpenTelemetry traces",
    ),
    (
        "TRACING_SERVICE_NAME",
        "tollgate exports no OpenTelemetry traces",
    ),
    (
        "TRACING_EXPORTER_PROTOCOL",
        "tollgate exports no OpenTelemetry traces",
    ),
    (
        "TRACING_SAMPLING_RATE",
        "tollgate exports no OpenTelemetry traces",
    ),
    (
        "REDIS_PERSECOND_URL",
        "it applies with REDIS_PERSECOND=true only",
    ),
    (
        "REDIS_PERSECOND_SOCKET_TYPE",
        "it applies with REDIS_PERSECOND=true only",
    ),
    (
        "REDIS_PERSECOND_TYPE",
        "it applies with REDIS_PERSECOND=true only",
    ),
];

/// Refused when true, each with what to do instead.
const REFUSED_WHEN_TRUE: [(&str, &str); 4] = [
    ("USE_STATSD", "tollgate sends no statsd: its stats are at /metrics on PORT, under upstream's Prometheus names; set USE_STATSD=false and scrape /metrics"),
    ("GRPC_SERVER_USE_TLS", "tollgate's gRPC listener has no TLS: terminate TLS in front of it (a sidecar or mesh)"),
    ("REDIS_PERSECOND", "tollgate uses one store for every limit: unset REDIS_PERSECOND (per-second limits then count in REDIS_URL)"),
    ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "tollgate always verifies the Redis server's certificate"),
];

/// Upstream's defaults for where its configuration lives.
const DEFAULT_RUNTIME_ROOT: &str = "/srv/runtime_data/current";
const DEFAULT_APP_DIRECTORY: &str = "config";
/// Upstream's default Redis: a twemproxy (nutcracker) socket beside it.
const DEFAULT_REDIS_URL: &str = "/var/run/nutcracker/ratelimit.sock";

/// What the environment sets; `None` leaves tollgate's own default (or
/// its flag) in place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// `HOST` and `PORT`: the HTTP API (`/json`, `/healthcheck`, tollgate's own).
    pub http: Option<SocketAddr>,
    /// `GRPC_HOST` and `GRPC_PORT`.
    pub grpc: Option<SocketAddr>,
    /// The store URL from `BACKEND_TYPE` and `REDIS_*`.
    pub store: Option<String>,
    /// `REDIS_TLS_CACERT`: the certificate authorities Redis' certificate is
    /// checked against, instead of the system's.
    pub redis_ca_file: Option<PathBuf>,
    /// `CACHE_KEY_PREFIX`.
    pub prefix: Option<String>,
    /// `LOG_FORMAT`.
    pub log_format: Option<LogFormat>,
    /// `LOG_LEVEL`, as a log filter.
    pub log_filter: Option<String>,
    /// `RUNTIME_*`: the configuration directory.
    pub config: Option<Source>,
    /// `USE_PROMETHEUS`, `PROMETHEUS_ADDR`, `PROMETHEUS_PATH`: the metrics'
    /// own listener.
    pub metrics: Option<MetricsOptions>,
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`, `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`.
    pub health: Health,
    /// One line per variable accepted without effect.
    pub warnings: Vec<String>,
}

/// The variables refused, each with why.
#[derive(Debug, thiserror::Error)]
#[error("envoyproxy/ratelimit settings tollgate cannot honour: {}", .0.join("; "))]
pub struct SettingsError(pub Vec<String>);

/// Reads upstream's variables through `env` (`std::env::var` in a process).
pub fn read(env: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
    let mut r = Reader {
        env: &|name| env(name).filter(|v| !v.is_empty()),
        refused: Vec::new(),
    };
    let mut out = Settings::default();
    for (name, why) in NO_EFFECT {
        // A zero or false value asks for nothing.
        let asked = (r.env)(name).filter(|v| v != "0" && !v.eq_ignore_ascii_case("false"));
        if let Some(value) = asked {
            let value = if name.contains("AUTH") {
                "***"
            } else {
                value.as_str()
            };
            out.warnings
                .push(format!("{name}={value} has no effect: {why}"));
        }
    }
    for (name, why) in REFUSED_WHEN_TRUE {
        if r.flag(name) == Some(true) {
            r.refuse(name, why);
        }
    }
    r.only("PROTO", &["tcp"], "tollgate listens on TCP only");
    r.only(
        "CONFIG_TYPE",
        &["FILE"],
        "tollgate reads its configuration from files (xDS is not supported)",
    );
    if (r.env)("GRPC_UDS").is_some() {
        r.refuse(
            "GRPC_UDS",
            "tollgate's gRPC listens on TCP only (GRPC_HOST, GRPC_PORT)",
        );
    }
    out.http = r.listener("HOST", "PORT");
    out.metrics = r.prometheus();
    if out.metrics.is_none() {
        for name in ["PROMETHEUS_ADDR", "PROMETHEUS_PATH"] {
            if let Some(value) = (r.env)(name) {
                out.warnings.push(format!(
                    "{name}={value} has no effect: it applies with USE_PROMETHEUS=true only"
                ));
            }
        }
    }
    out.grpc = r.listener("GRPC_HOST", "GRPC_PORT");
    out.log_format = match (r.env)("LOG_FORMAT") {
        None => None,
        Some(f) if f.eq_ignore_ascii_case("json") => Some(LogFormat::Json),
        Some(f) if f.eq_ignore_ascii_case("text") => Some(LogFormat::Text),
        Some(f) => {
            r.refuse("LOG_FORMAT", &format!("`{f}` is neither text nor json"));
            None
        }
    };
    out.log_filter = (r.env)("LOG_LEVEL").and_then(|level| match log_filter(&level) {
        Some(filter) => Some(filter.to_string()),
        None => {
            r.refuse(
                "LOG_LEVEL",
                &format!("`{level}` is not a level (error, warn, info, debug, trace)"),
            );
            None
        }
    });
    out.prefix = (r.env)("CACHE_KEY_PREFIX");
    out.config = r.runtime();
    if out.config.is_none() && r.flag("MERGE_DOMAIN_CONFIG") == Some(true) {
        out.warnings.push(
            "MERGE_DOMAIN_CONFIG=true has no effect: it applies to the RUNTIME_* directory only"
                .to_string(),
        );
    }
    out.health = Health {
        needs_a_domain: r.flag("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED") == Some(true),
        needs_the_store: r.flag("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION") == Some(true),
    };
    // Upstream's store unless nothing about it is said: a deployment that
    // gives its runtime directory and relies on upstream's default Redis
    // gets that Redis, not a private in-memory store.
    let says_store = out.config.is_some()
        || [
            "BACKEND_TYPE",
            "REDIS_URL",
            "REDIS_SOCKET_TYPE",
            "REDIS_TYPE",
            "REDIS_AUTH",
            "REDIS_TLS",
        ]
        .iter()
        .any(|name| (r.env)(name).is_some());
    if says_store {
        out.store = r.store();
        out.redis_ca_file = (r.env)("REDIS_TLS_CACERT").map(PathBuf::from);
    }
    if r.refused.is_empty() {
        Ok(out)
    } else {
        Err(SettingsError(r.refused))
    }
}

struct Reader<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    refused: Vec<String>,
}

impl Reader<'_> {
    fn refuse(&mut self, name: &str, why: &str) {
        let value = (self.env)(name).unwrap_or_default();
        // The value is left out where it may be a secret.
        let shown = if name.contains("AUTH") {
            "***".to_string()
        } else {
            value
        };
        self.refused.push(format!("{name}={shown}: {why}"));
    }

    /// A boolean as Go's `strconv.ParseBool` reads it; a bad one refused.
    fn flag(&mut self, name: &str) -> Option<bool> {
        let value = (self.env)(name)?;
        match value.as_str() {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
            "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
            _ => {
                self.refuse(name, "not a boolean (true or false)");
                None
            }
        }
    }

    /// Refuses a value outside `allowed` (any case).
    fn only(&mut self, name: &str, allowed: &[&str], why: &str) {
        if let Some(value) = (self.env)(name) {
            if !allowed.iter().any(|a| a.eq_ignore_ascii_case(&value)) {
                self.refuse(name, why);
            }
        }
    }

    /// `HOST`/`PORT`-style pair, when either is set (the other at
    /// upstream's default: all interfaces, or the port tollgate uses too).
    fn listener(&mut self, host_var: &str, port_var: &str) -> Option<SocketAddr> {
        let host = (self.env)(host_var);
        let port = (self.env)(port_var);
        if host.is_none() && port.is_none() {
            return None;
        }
        let default_port = if port_var == "PORT" { 8080 } else { 8081 };
        let port = match port.map(|p| p.parse::<u16>()) {
            None => default_port,
            Some(Ok(p)) => p,
            Some(Err(_)) => {
                self.refuse(port_var, "not a port number");
                return None;
            }
        };
        let host = host.unwrap_or_else(|| "0.0.0.0".to_string());
        let host = host.trim_start_matches('[').trim_end_matches(']');
        match (host, port).to_socket_addrs().map(|mut a| a.next()) {
            Ok(Some(addr)) => Some(addr),
            _ => {
                self.refuse(host_var, "not an address this host can listen on");
                None
            }
        }
    }

    /// The metrics' listener of `USE_PROMETHEUS=true`: `PROMETHEUS_ADDR`
    /// (Go's `:9090`, all interfaces) and `PROMETHEUS_PATH`.
    fn prometheus(&mut self) -> Option<MetricsOptions> {
        if self.flag("USE_PROMETHEUS") != Some(true) {
            return None;
        }
        let addr = (self.env)("PROMETHEUS_ADDR").unwrap_or_else(|| ":9090".into());
        let (host, port) = addr.rsplit_once(':').unwrap_or((addr.as_str(), ""));
        let host = if host.is_empty() {
            "0.0.0.0"
        } else {
            host.trim_start_matches('[').trim_end_matches(']')
        };
        let listen = port
            .parse::<u16>()
            .ok()
            .and_then(|port| (host, port).to_socket_addrs().ok()?.next());
        let Some(listen) = listen else {
            self.refuse(
                "PROMETHEUS_ADDR",
                "not an address this host can listen on (HOST:PORT or :PORT)",
            );
            return None;
        };
        let path = (self.env)("PROMETHEUS_PATH").unwrap_or_else(|| "/metrics".into());
        if !path.starts_with('/') {
            self.refuse("PROMETHEUS_PATH", "a path starts with /");
            return None;
        }
        Some(MetricsOptions { listen, path })
    }

    /// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`, when any of
    /// the three is set.
    fn runtime(&mut self) -> Option<Source> {
        let names = [
            "RUNTIME_ROOT",
            "RUNTIME_SUBDIRECTORY",
            "RUNTIME_APPDIRECTORY",
        ];
        if names.iter().all(|n| (self.env)(n).is_none()) {
            return None;
        }
        let root = PathBuf::from(
            (self.env)("RUNTIME_ROOT").unwrap_or_else(|| DEFAULT_RUNTIME_ROOT.into()),
        );
        let sub = (self.env)("RUNTIME_SUBDIRECTORY").unwrap_or_default();
        let app =
            (self.env)("RUNTIME_APPDIRECTORY").unwrap_or_else(|| DEFAULT_APP_DIRECTORY.into());
        let watch_root = self.flag("RUNTIME_WATCH_ROOT").unwrap_or(true);
        Some(Source {
            path: root.join(sub).join(app),
            directory: DirectoryOptions {
                dot_files: !self.flag("RUNTIME_IGNOREDOTFILES").unwrap_or(false),
                root_link: watch_root.then_some(root),
                merge_domains: self.flag("MERGE_DOMAIN_CONFIG") == Some(true),
            },
        })
    }

    /// The store URL of `BACKEND_TYPE` and `REDIS_*`.
    fn store(&mut self) -> Option<String> {
        match (self.env)("BACKEND_TYPE") {
            Some(b) if !b.eq_ignore_ascii_case("redis") => {
                self.refuse("BACKEND_TYPE", "tollgate's shared stores are Redis (and PostgreSQL with --store); memcache is not supported");
                return None;
            }
            _ => {}
        }
        let kind = (self.env)("REDIS_TYPE")
            .unwrap_or_else(|| "single".into())
            .to_ascii_lowercase();
        if kind == "sentinel" {
            self.refuse(
                "REDIS_TYPE",
                "Redis Sentinel is not supported: give the primary (single) or a cluster",
            );
            return None;
        }
        if kind != "single" && kind != "cluster" {
            self.refuse("REDIS_TYPE", "expected single or cluster");
            return None;
        }
        let socket = (self.env)("REDIS_SOCKET_TYPE")
            .unwrap_or_else(|| "unix".into())
            .to_ascii_lowercase();
        if socket != "unix" && socket != "tcp" {
            self.refuse("REDIS_SOCKET_TYPE", "expected unix or tcp");
            return None;
        }
        let url = (self.env)("REDIS_URL").unwrap_or_else(|| DEFAULT_REDIS_URL.into());
        let tls = self.flag("REDIS_TLS") == Some(true);
        for name in ["REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY"] {
            if (self.env)(name).is_some() {
                self.refuse(name, "client certificates for Redis are not supported");
            }
        }
        let auth = (self.env)("REDIS_AUTH");
        if socket == "unix" {
            if kind == "cluster" || tls {
                self.refuse(
                    "REDIS_SOCKET_TYPE",
                    "a unix socket takes neither REDIS_TYPE=cluster nor REDIS_TLS",
                );
                return None;
            }
            if url.contains(':') && !url.starts_with('/') {
                self.refuse("REDIS_URL", "REDIS_SOCKET_TYPE is unix (upstream's default) but this looks like HOST:PORT: set REDIS_SOCKET_TYPE=tcp");
                return None;
            }
            let query = auth.map(|a| match a.split_once(':') {
                Some((user, pass)) => format!("?user={}&pass={}", encode(user), encode(pass)),
                None => format!("?pass={}", encode(&a)),
            });
            return Some(format!("unix://{url}{}", query.unwrap_or_default()));
        }
        let userinfo = auth.map_or_else(String::new, |a| match a.split_once(':') {
            Some((user, pass)) => format!("{}:{}@", encode(user), encode(pass)),
            None => format!(":{}@", encode(&a)),
        });
        if kind == "cluster" {
            if tls {
                self.refuse("REDIS_TLS", "TLS to a Redis Cluster is not supported");
                return None;
            }
            let nodes: Vec<String> = url
                .split(',')
                .map(|n| format!("{userinfo}{}", n.trim()))
                .collect();
            return Some(format!(
                "{}{}",
                tollgate_redis::CLUSTER_SCHEME,
                nodes.join(",")
            ));
        }
        let scheme = if tls { "rediss" } else { "redis" };
        Some(format!("{scheme}://{userinfo}{url}"))
    }
}

/// logrus' levels as a log filter (`panic` and `fatal` as `error`).
fn log_filter(level: &str) -> Option<&'static str> {
    Some(match level.to_ascii_lowercase().as_str() {
        "panic" | "fatal" | "error" => "error",
        "warn" | "warning" => "warn",
        "info" => "info",
        "debug" => "debug",
        "trace" => "trace",
        _ => return None,
    })
}

/// Percent-encodes all but RFC 3986's unreserved characters, for a URL's
/// user information or query.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_env(pairs: &[(&str, &str)]) -> Result<Settings, SettingsError> {
        let env: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        read(move |name| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn nothing_set_changes_nothing() {
        assert_eq!(read_env(&[]).unwrap(), Settings::default());
    }

    #[test]
    fn redis_urls_for_each_type_and_socket() {
        let store = |pairs: &[(&str, &str)]| read_env(pairs).unwrap().store.unwrap();
        assert_eq!(
            store(&[
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_URL", "r:6379"),
                ("REDIS_TLS", "true"),
                ("REDIS_AUTH", "u:p@ss")
            ]),
            "rediss://u:p%40ss@r:6379"
        );
        assert_eq!(
            store(&[
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_TYPE", "CLUSTER"),
                ("REDIS_URL", "a:1, b:2"),
                ("REDIS_AUTH", "pw")
            ]),
            "redis+cluster://:pw@a:1,:pw@b:2"
        );
        // Upstream's defaults: a nutcracker socket.
        assert_eq!(
            store(&[("RUNTIME_ROOT", "/data")]),
            "unix:///var/run/nutcracker/ratelimit.sock"
        );
        assert_eq!(
            store(&[("REDIS_URL", "/run/r.sock"), ("REDIS_AUTH", "pw")]),
            "unix:///run/r.sock?pass=pw"
        );
    }

    #[test]
    fn refusals_name_every_variable_and_hide_secrets() {
        let e = read_env(&[
            ("REDIS_TYPE", "sentinel"),
            ("USE_STATSD", "true"),
            ("GRPC_SERVER_USE_TLS", "1"),
            ("BACKEND_TYPE", "memcache"),
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("LOG_LEVEL", "loud"),
        ])
        .unwrap_err();
        let text = e.to_string();
        for name in [
            "USE_STATSD=true",
            "GRPC_SERVER_USE_TLS",
            "BACKEND_TYPE=memcache",
            "CONFIG_TYPE",
            "LOG_LEVEL=loud",
        ] {
            assert!(text.contains(name), "{name}: {text}");
        }
        let e = read_env(&[("REDIS_URL", "redis:6379"), ("REDIS_AUTH", "hunter2")]).unwrap_err();
        assert!(e.to_string().contains("set REDIS_SOCKET_TYPE=tcp"), "{e}");
        let e = read_env(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_TYPE", "sentinel"),
            ("REDIS_AUTH", "hunter2"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("Sentinel is not supported"), "{e}");
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    #[test]
    fn listeners_logs_runtime_and_warnings() {
        let s = read_env(&[
            ("PORT", "9080"),
            ("GRPC_HOST", "127.0.0.1"),
            ("LOG_LEVEL", "WARN"),
            ("LOG_FORMAT", "json"),
            ("RUNTIME_ROOT", "/srv/current"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_IGNOREDOTFILES", "true"),
            ("RUNTIME_WATCH_ROOT", "false"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "r:6379"),
            ("DEBUG_PORT", "6070"),
            ("LOCAL_CACHE_SIZE_IN_BYTES", "0"),
            ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
        ])
        .unwrap();
        assert_eq!(s.http, Some("0.0.0.0:9080".parse().unwrap()));
        assert_eq!(s.grpc, Some("127.0.0.1:8081".parse().unwrap()));
        assert_eq!(s.log_filter.as_deref(), Some("warn"));
        assert_eq!(s.log_format, Some(LogFormat::Json));
        let config = s.config.unwrap();
        assert_eq!(config.path, PathBuf::from("/srv/current/ratelimit/config"));
        assert!(!config.directory.dot_files);
        assert_eq!(config.directory.root_link, None);
        assert!(s.health.needs_a_domain);
        assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
        assert!(s.warnings[0].starts_with("DEBUG_PORT=6070 has no effect"));
    }
}
