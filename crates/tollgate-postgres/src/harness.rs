//! Throwaway PostgreSQL servers on free local ports, for the tests, benches
//! and examples: never the machine's own database.
//!
//! Binaries come from the Debian `postgresql` package: the newest
//! `/usr/lib/postgresql/<version>/bin` holding `initdb` and `postgres`, else
//! the directory `initdb` on `PATH` resolves to. Each server gets its own
//! temporary directory (data, socket and log; the data a copy of a cluster
//! `initdb` made once), trust authentication for the user `tollgate`, no durability (`fsync=off`: these servers are for tests)
//! and listens on 127.0.0.1 only.
//!
//! PostgreSQL refuses to run as root, so under root (CI) `initdb` and
//! `postgres` run as the `postgres` user (or `nobody`) in a directory owned
//! by it. The server is the harness's own child with a parent-death signal,
//! so a test process that exits without dropping it (a shared server in a
//! `static`, a crash) takes it along; directories left behind by dead
//! processes are removed by the next start.

use std::ffi::CString;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Set to `1` to skip the PostgreSQL tests when `postgresql` is not installed.
pub const SKIP_VAR: &str = "TOLLGATE_SKIP_POSTGRES";

/// Overrides where the PostgreSQL binaries are looked for.
pub const BIN_VAR: &str = "TOLLGATE_POSTGRES_BIN";

/// The database user of every harness server (trust authentication).
pub const USER: &str = "tollgate";

/// How long a server may take to start or stop.
const PATIENCE: Duration = Duration::from_secs(30);

/// Ports tried before giving up on starting a server.
const PORT_ATTEMPTS: usize = 5;

/// Names of the harness's temporary directories: `<PREFIX><pid>-<n>`.
const DIR_PREFIX: &str = "tollgate-pg-";

/// Why a server could not be started.
#[derive(Debug)]
pub enum HarnessError {
    /// The PostgreSQL binaries were not found.
    Missing(String),
    /// A step failed (the message says which, with the server's log).
    Failed(String),
}

impl std::fmt::Display for HarnessError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HarnessError::Missing(why) => write!(
                f,
                "{why}: install the Debian package `postgresql` (apt-get install postgresql), \
                 point {BIN_VAR} at the directory holding initdb and postgres, or set \
                 {SKIP_VAR}=1 to skip the PostgreSQL tests"
            ),
            HarnessError::Failed(why) => write!(f, "could not run PostgreSQL: {why}"),
        }
    }
}

impl std::error::Error for HarnessError {}

/// Whether the caller asked to skip tests that need PostgreSQL.
pub fn skip_requested() -> bool {
    std::env::var(SKIP_VAR).is_ok_and(|v| v == "1")
}

/// One PostgreSQL server on a free port, stopped and deleted when dropped.
pub struct PgServer {
    port: u16,
    root: PathBuf,
    bin: PathBuf,
    owner: Option<(u32, u32)>,
    child: Option<Child>,
}

impl PgServer {
    /// Creates a database cluster and starts a server on it.
    pub fn start() -> Result<Self, HarnessError> {
        remove_stale_dirs();
        let bin = bin_dir()?;
        let owner = unprivileged_owner()?;
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "{DIR_PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&root).map_err(failed("create the temporary directory"))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&root, Some(uid), Some(gid))
                .map_err(failed("hand the temporary directory to the server's user"))?;
        }
        let mut server = PgServer {
            port: free_port()?,
            root,
            bin,
            owner,
            child: None,
        };
        server.initdb()?;
        // A port found free can be taken by another process before the
        // server binds it: the server then exits, and another port is tried.
        for _ in 1..PORT_ATTEMPTS {
            match server.resume() {
                Err(_) if server.log_tail().contains("Address already in use") => {
                    server.port = free_port()?;
                }
                started => return started.map(|()| server),
            }
        }
        server.resume().map(|()| server)
    }

    /// One server for the whole test process, started on first use and
    /// stopped when the process exits.
    pub fn shared() -> Result<&'static PgServer, HarnessError> {
        static SHARED: OnceLock<Result<&'static PgServer, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                // Started from a thread that never ends: the parent-death
                // signal fires when the *thread* that spawned the server
                // exits, and test threads end with their test.
                let (tx, rx) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let started = PgServer::start().map(|s| &*Box::leak(Box::new(s)));
                    let _ = tx.send(started.map_err(|e| e.to_string()));
                    loop {
                        std::thread::park();
                    }
                });
                rx.recv()
                    .unwrap_or_else(|_| Err("the server thread died".into()))
            })
            .clone()
            .map_err(HarnessError::Failed)
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://tollgate@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/postgres", self.port)
    }

    /// The directory holding `initdb`, `postgres`, `pgbench`...
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// Stops the server (fast shutdown: sessions are ended) and waits for it.
    pub fn stop(&mut self) -> Result<(), HarnessError> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        // SIGINT is PostgreSQL's fast shutdown. The pid is our own child's.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        let start = Instant::now();
        while start.elapsed() < PATIENCE {
            if child
                .try_wait()
                .map_err(failed("wait for the server"))?
                .is_some()
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        Err(HarnessError::Failed(
            "the server did not stop in time".into(),
        ))
    }

    /// Starts the server again on the same port and data after [`stop`](Self::stop).
    pub fn resume(&mut self) -> Result<(), HarnessError> {
        if self.child.is_some() {
            return Ok(());
        }
        let log = std::fs::File::create(self.root.join("postgres.log"))
            .map_err(failed("create the server log"))?;
        if let Some((uid, gid)) = self.owner {
            let _ = std::os::unix::fs::chown(self.root.join("postgres.log"), Some(uid), Some(gid));
        }
        let mut cmd = self.command("postgres");
        cmd.arg("-D")
            .arg(self.root.join("data"))
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(&self.root)
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "max_connections=200"])
            .stdout(Stdio::null())
            .stderr(log);
        // SAFETY: prctl is async-signal-safe and touches no shared state.
        unsafe {
            cmd.pre_exec(|| {
                // Runs after the switch to the server's user, which would
                // clear it otherwise.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(failed("start postgres"))?;
        self.child = Some(child);
        self.wait_ready()
    }

    /// Freezes the server (`SIGSTOP` to the postmaster and every process it
    /// started): sessions stay open and nothing is answered until
    /// [`thaw`](Self::thaw).
    pub fn freeze(&self) -> Result<(), HarnessError> {
        self.signal_all(libc::SIGSTOP)
    }

    /// Lets a frozen server run again (`SIGCONT`).
    pub fn thaw(&self) -> Result<(), HarnessError> {
        self.signal_all(libc::SIGCONT)
    }

    /// Sends `signal` to the postmaster (our child) and its children.
    fn signal_all(&self, signal: libc::c_int) -> Result<(), HarnessError> {
        let Some(child) = &self.child else {
            return Err(HarnessError::Failed("the server is not running".into()));
        };
        let postmaster = child.id();
        let mut pids = vec![postmaster];
        let entries = std::fs::read_dir("/proc").map_err(failed("list the processes"))?;
        for entry in entries.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            // The parent is the fourth field of /proc/PID/stat, after the
            // command name in parentheses.
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if parent == Some(postmaster) {
                pids.push(pid);
            }
        }
        for pid in pids {
            // The pids are our child's and its children's.
            unsafe { libc::kill(pid as libc::pid_t, signal) };
        }
        Ok(())
    }

    /// Stops and starts the server: every session is cut, the data stays.
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.stop()?;
        self.resume()
    }

    /// A fresh cluster in `data`: a copy of a template cluster made once per
    /// machine, PostgreSQL version and user (`initdb` takes seconds, a copy
    /// a fraction of one).
    fn initdb(&self) -> Result<(), HarnessError> {
        let template = self.template()?;
        let mut cp = Command::new("cp");
        cp.arg("-a")
            .arg(template.join("data"))
            .arg(self.root.join("data"))
            .current_dir(&self.root);
        if let Some((uid, gid)) = self.owner {
            cp.uid(uid).gid(gid);
        }
        run(cp, "copy the template cluster")
    }

    fn template(&self) -> Result<PathBuf, HarnessError> {
        let version = self
            .bin
            .parent()
            .and_then(|d| d.file_name())
            .map(|v| v.to_string_lossy().into_owned())
            .unwrap_or_default();
        let uid = self
            .owner
            .map_or_else(|| unsafe { libc::geteuid() }, |o| o.0);
        let template = std::env::temp_dir().join(format!("tollgate-pgtemplate-{version}-{uid}"));
        if template.join("data").join("PG_VERSION").is_file() {
            return Ok(template);
        }
        // Made aside and renamed into place, so a racing process sees a
        // whole template or none (a leftover is removed as stale).
        let staging = self.root.with_file_name(format!(
            "{}-template",
            self.root.file_name().unwrap_or_default().to_string_lossy()
        ));
        std::fs::create_dir_all(&staging).map_err(failed("create the template directory"))?;
        if let Some((uid, gid)) = self.owner {
            std::os::unix::fs::chown(&staging, Some(uid), Some(gid))
                .map_err(failed("hand the template directory to the server's user"))?;
        }
        let mut initdb = self.command("initdb");
        initdb
            .arg("-D")
            .arg(staging.join("data"))
            .args(["-U", USER, "--auth=trust", "--no-sync", "--no-instructions"])
            .args(["-E", "UTF8", "--locale=C"])
            .current_dir(&staging);
        run(initdb, "run initdb")?;
        if std::fs::rename(&staging, &template).is_err() {
            // Another process got there first.
            let _ = std::fs::remove_dir_all(&staging);
        }
        Ok(template)
    }

    /// `program` from the server's bin directory, as the server's user, in
    /// the temporary directory (the caller's may be unreadable to that user).
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        cmd.current_dir(&self.root);
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid).gid(gid);
        }
        cmd
    }

    /// Ready once `postmaster.pid` says so (the server accepts connections
    /// before it can serve them).
    fn wait_ready(&mut self) -> Result<(), HarnessError> {
        let pid_file = self.root.join("data").join("postmaster.pid");
        let start = Instant::now();
        while start.elapsed() < PATIENCE {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(HarnessError::Failed(format!(
                        "postgres exited ({status}): {}",
                        self.log_tail()
                    )));
                }
            }
            let status = std::fs::read_to_string(&pid_file).unwrap_or_default();
            if status.lines().nth(7).is_some_and(|s| s.trim() == "ready") {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(HarnessError::Failed(format!(
            "postgres did not become ready: {}",
            self.log_tail()
        )))
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.root.join("postgres.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // Best effort: a server that would not stop has been killed.
        let _ = self.stop();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Runs `cmd` to completion; its standard error is the failure's message.
fn run(mut cmd: Command, what: &'static str) -> Result<(), HarnessError> {
    let out = cmd.stdin(Stdio::null()).output().map_err(failed(what))?;
    if !out.status.success() {
        return Err(HarnessError::Failed(format!(
            "cannot {what}: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}

fn failed(what: &'static str) -> impl Fn(std::io::Error) -> HarnessError {
    move |e| HarnessError::Failed(format!("cannot {what}: {e}"))
}

/// The newest Debian versioned bin directory, else where `initdb` on `PATH`
/// really lives (`/usr/local/bin/initdb` may be a symlink into it).
fn bin_dir() -> Result<PathBuf, HarnessError> {
    let complete = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(dir) = std::env::var_os(BIN_VAR).map(PathBuf::from) {
        return if complete(&dir) {
            Ok(dir)
        } else {
            Err(HarnessError::Missing(format!(
                "{BIN_VAR}={} holds no initdb and postgres",
                dir.display()
            )))
        };
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, e.path().join("bin")))
        })
        .filter(|(_, dir)| complete(dir))
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions.pop() {
        return Ok(dir);
    }
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|dir| std::fs::canonicalize(dir.join("initdb")).ok())
        .filter_map(|initdb| initdb.parent().map(Path::to_path_buf))
        .find(|dir| complete(dir));
    on_path.ok_or_else(|| {
        HarnessError::Missing(
            "initdb and postgres were found neither in /usr/lib/postgresql/<version>/bin \
             nor on PATH"
                .into(),
        )
    })
}

/// Under root, the user the server runs as: `postgres`, else `nobody`.
fn unprivileged_owner() -> Result<Option<(u32, u32)>, HarnessError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    for name in ["postgres", "nobody"] {
        let c_name = CString::new(name).expect("no NUL");
        // SAFETY: getpwnam returns null or a pointer to a static record,
        // read at once (the harness starts servers one at a time per thread).
        let entry = unsafe { libc::getpwnam(c_name.as_ptr()) };
        if !entry.is_null() {
            let (uid, gid) = unsafe { ((*entry).pw_uid, (*entry).pw_gid) };
            return Ok(Some((uid, gid)));
        }
    }
    Err(HarnessError::Failed(
        "running as root, and neither a `postgres` nor a `nobody` user exists to run \
         the server as"
            .into(),
    ))
}

fn free_port() -> Result<u16, HarnessError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(failed("find a free port"))
}

/// Removes temporary directories of harness processes that no longer exist.
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(DIR_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A `pgbench` script (for `-M prepared`) sending the very statement a
/// check of `cost` under `policy` sends to the default schema and table, on
/// keys `k0` to `k<keys - 1>` picked at random: the one-statement charge of
/// a single bucket-family limit (admitted charges end there; the client
/// falls back to `_apply_within` only for denials and new keys), else the
/// `_apply_within` call. Every value the client sends as a parameter is a
/// pgbench variable, so the server plans it as it plans the client's, but
/// for the charge's deadline: a timestamp, which pgbench variables cannot
/// hold, written in as a literal far ahead (the client's is never reached
/// either). pgbench's integers are 64-bit: a cost of 2^63 ticks or more
/// (cost times period) does not fit its variables.
pub fn pgbench_check_script(policy: &tollgate::Policy, cost: u64, keys: u64) -> String {
    let names = crate::schema::Names::new(crate::DEFAULT_SCHEMA, crate::DEFAULT_TABLE)
        .expect("the default names are plain identifiers");
    let encoded = crate::encoding::encode(policy);
    let mut script = format!(
        "\\set k random(0, {})\n\\set policy {}\n",
        keys.saturating_sub(1),
        encoded.id,
    );
    let op = tollgate::Operation::Check(cost);
    let statement = match crate::encoding::bucket_charge(op, policy) {
        Some(charge) => {
            script.push_str(&format!("\\set cost {}\n", charge.cost_ticks()));
            [
                ("$4", "'infinity'"),
                ("$3", ":cost"),
                ("$2", ":policy"),
                ("$1", "('k' || :k)"),
            ]
            .iter()
            .fold(
                names.charge_sql(&charge.limit, crate::schema::ChargeClock::Database),
                |sql, (param, value)| sql.replace(param, value),
            )
        }
        None => {
            let limits: Vec<String> = encoded.limits.iter().map(i64::to_string).collect();
            // The deadline the client sends, far ahead: never reached here.
            script.push_str(&format!("\\set deadline {}\n", i64::MAX - 1));
            format!(
                "SELECT {}_apply_within('k' || :k, :policy, '{{{}}}'::bigint[], 0::smallint, \
                 {cost}::numeric, NULL::bigint, 0::bigint, :deadline)",
                names.qualified(),
                limits.join(",")
            )
        }
    };
    // pgbench reads one command per line: comments out, lines joined.
    let one_line: Vec<&str> = statement
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("--"))
        .collect();
    script.push_str(&one_line.join(" "));
    script.push_str(";\n");
    script
}
