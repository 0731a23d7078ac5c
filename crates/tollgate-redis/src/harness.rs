//! Throwaway Redis servers and clusters on free local ports, for the tests,
//! benches and examples: never the machine's own Redis.
//!
//! Binaries come from `PATH` (`redis-server`, `redis-cli`; Debian package
//! `redis-server`). Each server runs without persistence in its own
//! temporary directory and is killed when dropped.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Set to `1` to skip the Redis tests when `redis-server` is not installed.
pub const SKIP_VAR: &str = "TOLLGATE_SKIP_REDIS";

/// How long a server or cluster may take to come up.
const STARTUP: Duration = Duration::from_secs(10);

/// Ports tried before giving up on starting a server.
const PORT_ATTEMPTS: usize = 5;

/// The certificate file of a TLS server, in its directory.
const TLS_CERT: &str = "tls.crt";

/// Why a spawn did not give a ready server.
enum Spawn {
    /// The process exited before answering, typically because its port was
    /// taken meanwhile.
    Exited(String),
    /// Anything else.
    Failed(HarnessError),
}

impl From<HarnessError> for Spawn {
    fn from(e: HarnessError) -> Self {
        Spawn::Failed(e)
    }
}

/// Why a server could not be started.
#[derive(Debug)]
pub enum HarnessError {
    /// `redis-server` or `redis-cli` is not on `PATH`.
    Missing(&'static str),
    /// It started but did not become ready in time, or a step failed.
    Failed(String),
}

impl std::fmt::Display for HarnessError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HarnessError::Missing(bin) => write!(
                f,
                "`{bin}` was not found on PATH: install the Debian package `redis-server` \
                 (apt-get install redis-server), or set {SKIP_VAR}=1 to skip the Redis tests"
            ),
            HarnessError::Failed(why) => write!(f, "could not start Redis: {why}"),
        }
    }
}

impl std::error::Error for HarnessError {}

/// Whether the caller asked to skip tests that need Redis.
pub fn skip_requested() -> bool {
    std::env::var(SKIP_VAR).is_ok_and(|v| v == "1")
}

/// One `redis-server` process on a free port.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    password: Option<String>,
    /// The CA file of a TLS-only server.
    tls_ca: Option<PathBuf>,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a standalone server (with `DEBUG` enabled for local clients).
    pub fn start() -> Result<Self, HarnessError> {
        Self::launch(0, None, false, |_, _| Ok(Vec::new()))
    }

    /// Starts a standalone server that requires `password` (`requirepass`).
    pub fn start_with_password(password: &str) -> Result<Self, HarnessError> {
        Self::launch(0, Some(password.into()), false, |_, _| {
            Ok(vec!["--requirepass".into(), password.into()])
        })
    }

    /// Starts a server that speaks only TLS, with the certificate chain and
    /// key given in PEM (the chain's certificate also serves as the CA that
    /// `redis-cli` trusts). Clients need not present a certificate.
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> Result<Self, HarnessError> {
        Self::launch(0, None, true, |port, dir| {
            let write = |name: &str, pem: &str| {
                let path = dir.join(name);
                std::fs::write(&path, pem).map_err(|e| HarnessError::Failed(e.to_string()))?;
                Ok::<_, HarnessError>(path.to_string_lossy().into_owned())
            };
            let (cert, key) = (write(TLS_CERT, cert_pem)?, write("tls.key", key_pem)?);
            let extra = [
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--tls-cert-file",
                &cert,
                "--tls-key-file",
                &key,
                "--tls-ca-cert-file",
                &cert,
                "--tls-auth-clients",
                "no",
            ];
            Ok(extra.map(String::from).to_vec())
        })
    }

    /// Starts a standalone server with extra `redis-server` arguments (for
    /// example `--maxmemory 1mb`).
    pub fn start_with_args(args: &[&str]) -> Result<Self, HarnessError> {
        Self::launch(0, None, false, |_, _| {
            Ok(args.iter().map(|a| a.to_string()).collect())
        })
    }

    /// Starts a server on a free port (free at `port + also_plus` too), with
    /// the arguments `extra` gives for that port and directory. A port found
    /// free can be taken by another process before the server binds it; the
    /// server then exits, and another port is tried.
    fn launch(
        also_plus: u16,
        password: Option<String>,
        tls: bool,
        extra: impl Fn(u16, &std::path::Path) -> Result<Vec<String>, HarnessError>,
    ) -> Result<Self, HarnessError> {
        let mut why = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port(also_plus)?;
            let dir = server_dir(port)?;
            let mut server = RedisServer {
                port,
                extra: extra(port, &dir)?,
                tls_ca: tls.then(|| dir.join(TLS_CERT)),
                dir,
                password: password.clone(),
                child: None,
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(Spawn::Exited(status)) => why = status,
                Err(Spawn::Failed(e)) => return Err(e),
            }
        }
        Err(HarnessError::Failed(format!(
            "redis-server exited at start on {PORT_ATTEMPTS} ports in a row (last: {why})"
        )))
    }

    fn spawn(&mut self) -> Result<(), Spawn> {
        // A TLS server's own arguments set `--port 0` after this one.
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--enable-debug-command", "local"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => HarnessError::Missing("redis-server"),
                _ => HarnessError::Failed(e.to_string()),
            })?;
        let pid = format!("process_id:{}", child.id());
        self.child = Some(child);
        let start = Instant::now();
        while start.elapsed() < STARTUP {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                return Err(Spawn::Exited(status.to_string()));
            }
            // Whoever answers must be our own process, not a server of
            // another test that got the same port.
            if self
                .cli(&["info", "server"])
                .is_ok_and(|info| info.lines().any(|l| l.trim() == pid))
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(Spawn::Failed(HarnessError::Failed(
            "timed out waiting for redis-server to answer".into(),
        )))
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`, or `rediss://` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls_ca.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Kills the server (losing every key and the loaded library) and starts
    /// a new one on the same port.
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.stop();
        self.spawn().map_err(|e| match e {
            Spawn::Exited(status) => HarnessError::Failed(format!(
                "redis-server exited at restart on port {} ({status})",
                self.port
            )),
            Spawn::Failed(e) => e,
        })
    }

    /// Runs `redis-cli` against this server (with its password, if it has
    /// one) and returns its output.
    pub fn cli(&self, args: &[&str]) -> Result<String, HarnessError> {
        let mut all = vec![];
        if let Some(password) = &self.password {
            all.extend(["--no-auth-warning", "-a", password]);
        }
        let ca = self.tls_ca.as_ref().map(|ca| ca.to_string_lossy());
        if let Some(ca) = &ca {
            all.extend(["--tls", "--cacert", ca]);
        }
        all.extend(args);
        cli(self.port, &all)
    }

    /// Calls of tollgate's script this server has run (`FCALL` or
    /// `EVALSHA`), from `INFO commandstats`: how many round trips decided.
    pub fn script_calls(&self) -> Result<u64, HarnessError> {
        let stats = self.cli(&["INFO", "commandstats"])?;
        Ok(stats
            .lines()
            .filter(|l| l.starts_with("cmdstat_fcall:") || l.starts_with("cmdstat_evalsha:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum())
    }

    /// Kills the server; [`RedisServer::restart`] starts it again.
    pub fn kill(&mut self) {
        self.stop();
    }

    /// Stops the process (`SIGSTOP`): connections stay open and nothing is
    /// answered until [`RedisServer::resume`].
    pub fn pause(&self) -> Result<(), HarnessError> {
        self.signal(libc::SIGSTOP)
    }

    /// Resumes a paused server (`SIGCONT`).
    pub fn resume(&self) -> Result<(), HarnessError> {
        self.signal(libc::SIGCONT)
    }

    fn signal(&self, signal: libc::c_int) -> Result<(), HarnessError> {
        let child = self
            .child
            .as_ref()
            .ok_or_else(|| HarnessError::Failed("the server is not running".into()))?;
        let pid = libc::pid_t::try_from(child.id())
            .map_err(|_| HarnessError::Failed("process id out of range".into()))?;
        // SAFETY: `kill` only sends a signal to our own child process.
        if unsafe { libc::kill(pid, signal) } != 0 {
            let why = std::io::Error::last_os_error();
            return Err(HarnessError::Failed(format!("signal {signal}: {why}")));
        }
        Ok(())
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Best effort: the process may already be gone.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of three primaries (no replicas) on free ports.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers, joins them with `redis-cli
    /// --cluster create` and waits for `cluster_state:ok` on each.
    pub fn start() -> Result<Self, HarnessError> {
        let mut nodes: Vec<RedisServer> = Vec::with_capacity(3);
        for _ in 0..3 {
            // The cluster bus listens on port + 10000, which must be free too.
            nodes.push(RedisServer::launch(10_000, None, false, |port, _| {
                Ok(["--cluster-enabled", "yes", "--cluster-config-file"]
                    .map(String::from)
                    .into_iter()
                    .chain([format!("nodes-{port}.conf")])
                    .collect())
            })?);
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let mut args = vec!["--cluster", "create"];
        args.extend(addrs.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "0", "--cluster-yes"]);
        cli(nodes[0].port, &args)?;
        for node in &nodes {
            wait_until(
                || {
                    cli(node.port, &["cluster", "info"])
                        .is_ok_and(|info| info.contains("cluster_state:ok"))
                },
                "cluster_state:ok",
            )?;
        }
        Ok(RedisCluster { nodes })
    }

    /// `redis+cluster://` with every node as a seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The primaries.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }
}

/// A fresh temporary directory for the server on `port`.
fn server_dir(port: u16) -> Result<PathBuf, HarnessError> {
    let dir = std::env::temp_dir().join(format!("tollgate-redis-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| HarnessError::Failed(e.to_string()))?;
    Ok(dir)
}

/// A port free on 127.0.0.1 (and, if `also_plus` > 0, at port + also_plus).
fn free_port(also_plus: u16) -> Result<u16, HarnessError> {
    for _ in 0..100 {
        let listener =
            TcpListener::bind("127.0.0.1:0").map_err(|e| HarnessError::Failed(e.to_string()))?;
        let port = listener
            .local_addr()
            .map_err(|e| HarnessError::Failed(e.to_string()))?
            .port();
        if also_plus == 0 {
            return Ok(port);
        }
        if let Some(bus) = port.checked_add(also_plus) {
            if TcpListener::bind(("127.0.0.1", bus)).is_ok() {
                return Ok(port);
            }
        }
    }
    Err(HarnessError::Failed("no free port pair found".into()))
}

fn cli(port: u16, args: &[&str]) -> Result<String, HarnessError> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => HarnessError::Missing("redis-cli"),
            _ => HarnessError::Failed(e.to_string()),
        })?;
    if !out.status.success() {
        return Err(HarnessError::Failed(format!(
            "redis-cli {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn wait_until(mut ready: impl FnMut() -> bool, what: &str) -> Result<(), HarnessError> {
    let start = Instant::now();
    while start.elapsed() < STARTUP {
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(HarnessError::Failed(format!(
        "timed out waiting for {what}"
    )))
}
