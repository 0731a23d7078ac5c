//! [`RedisBackend`]: the [`Backend`] of `tollgate` on Redis or Redis Cluster.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};
use tollgate::{Backend, BackendError, Operation, Outcome, Policy};
use tollgate_core::{Decision, Lease, Limit, RetryAfter};

use crate::conn::Conn;
use crate::encoded::{encode, encode_policy, key_suffixes, redis_keys, EncodedPolicy};
use crate::exact::{MAX_EXACT, MAX_TIME_US};
use crate::fold::Folder;
use crate::keys::KeySpace;
use crate::redact::redact;
use crate::script::{self, ScriptMode};

/// Default deadline of every call to the store.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

/// Default deadline of [`RedisConfig::connect`] (connecting and loading the
/// library).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Default key prefix.
pub const DEFAULT_PREFIX: &str = "tollgate:";

/// Default most decisions per fold ([`RedisConfig::fold`]).
pub const DEFAULT_FOLD: usize = 32;

/// Folds in flight at once: while fewer fly, a decision is sent at once.
/// Two keep the server busy while the client splits one fold's replies.
const FLIGHTS: usize = 2;

/// Default least TTL of keys charged by [`RedisBackend::check_at`]: replayed
/// times are not the server's clock, so `reset_after` cannot be their TTL.
pub const DEFAULT_REPLAY_TTL: Duration = Duration::from_secs(3600);

/// How to reach Redis and how to call it; [`RedisConfig::connect`] makes a
/// [`RedisBackend`]. Its `Debug` shows the URL without credentials.
#[derive(Clone)]
pub struct RedisConfig {
    url: String,
    prefix: String,
    timeout: Duration,
    connect_timeout: Duration,
    mode: ScriptMode,
    replay_ttl: Duration,
    root_certificates: Option<Vec<u8>>,
    fold: usize,
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact(&self.url))
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("mode", &self.mode)
            .field("replay_ttl", &self.replay_ttl)
            .field("root_certificates", &self.root_certificates.is_some())
            .field("fold", &self.fold)
            .finish()
    }
}

impl RedisConfig {
    /// Defaults for `url`: `redis://[user:password@]host:port[/db]` for one
    /// server, `rediss://...` for one server over TLS (rustls; the server's
    /// certificate is checked against the system's roots, or those of the
    /// `SSL_CERT_FILE` environment variable, or
    /// [`RedisConfig::root_certificates`]),
    /// `redis+cluster://host:port[,host:port...]` for a cluster (without TLS).
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            prefix: DEFAULT_PREFIX.into(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            mode: ScriptMode::Auto,
            replay_ttl: DEFAULT_REPLAY_TTL,
            root_certificates: None,
            fold: DEFAULT_FOLD,
        }
    }

    /// Most decisions folded into one call of the script (default
    /// [`DEFAULT_FOLD`]; 0 or 1 sends each alone). Decisions made while two
    /// calls are already in flight on the connection wait for one to land
    /// and then leave together as one `FCALL`, which reads the server's
    /// clock once and decides each in arrival order exactly as if sent
    /// alone at that time: the server's cost per call (the function call,
    /// `TIME`, the command's bookkeeping) is paid once per fold. A decision
    /// made while fewer are in flight is sent at once. Only on one server
    /// with Functions, and only on the server's clock: a cluster (a call
    /// may touch one slot only), `EVALSHA`, peeks and replays send each
    /// decision alone.
    pub fn fold(mut self, max: usize) -> Self {
        self.fold = max;
        self
    }

    /// For `rediss://`: trusts the certificate authorities in `pem` (one or
    /// more PEM certificates) instead of the system's.
    pub fn root_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.root_certificates = Some(pem.into());
        self
    }

    /// Prefix of every key (default `tollgate:`); no braces.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Deadline of each call (decision, refund, forced charge, lease or
    /// reset), including a reload of the library (default 50 ms).
    ///
    /// Each call carries this deadline on the server's clock (its offset
    /// from this host's measured with `TIME`): a call the server runs
    /// later (after a pause, a slow disk, a congested link) charges nothing.
    /// A call run just before the deadline whose reply arrives after it is
    /// still charged, so never refund after a `Timeout` (it could give back
    /// a charge that was never made): count the request as possibly
    /// charged. Refund only a known outcome, a request admitted and then
    /// not carried out.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Deadline of connecting and loading the library (default 1 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Functions, `EVALSHA`, or whichever the server supports (default).
    pub fn mode(mut self, mode: ScriptMode) -> Self {
        self.mode = mode;
        self
    }

    /// Least TTL of keys charged with replayed times (default one hour).
    pub fn replay_ttl(mut self, ttl: Duration) -> Self {
        self.replay_ttl = ttl;
        self
    }

    /// Connects (and, on one server, checks the credentials with a `PING`)
    /// within the connect deadline. The library is not loaded here: the
    /// first call that finds it missing loads it on the node owning its key,
    /// so connecting writes nothing (a full server still serves peeks) and
    /// touches no other node of a cluster.
    pub async fn connect(self) -> Result<RedisBackend, BackendError> {
        let deadline = self.connect_timeout;
        let keys = KeySpace::new(self.prefix.clone())?;
        let setup = async {
            let roots = self.root_certificates.clone();
            let mut conn = Conn::connect(&self.url, roots, deadline, self.timeout).await?;
            conn.ping().await?;
            Ok::<_, RedisError>(conn)
        };
        let conn = tokio::time::timeout(deadline, setup)
            .await
            .map_err(|_| BackendError::Timeout(deadline))?
            .map_err(|e| classify(e, deadline))?;
        let clock = Arc::new(ServerClock::unknown());
        let mut probe = conn.clone();
        let measured = clock.measure(&mut probe, &self.prefix);
        let _ = tokio::time::timeout(self.timeout, measured).await;
        let folder = match conn {
            Conn::Single(_) if self.fold > 1 => Some(Folder::new(self.fold, FLIGHTS)),
            _ => None,
        };
        Ok(RedisBackend {
            runner: Runner {
                conn,
                mode: self.mode,
                eval: Arc::new(AtomicBool::new(self.mode == ScriptMode::Eval)),
            },
            clock,
            keys,
            timeout: self.timeout,
            replay_ttl_ms: u64::try_from(self.replay_ttl.as_millis()).unwrap_or(u64::MAX),
            folder,
        })
    }
}

/// Rate limiting in Redis: each decision is one atomic call of the
/// `tollgate` Function library (or the same script through `EVALSHA`), with
/// the server's clock, TTLs equal to `reset_after`, every limit of a policy
/// charged or none, and the exact decisions of the core (durations rounded
/// up to the store clock's microsecond).
///
/// Calls have a deadline and fail with a typed [`BackendError`]:
/// `Timeout` (the store was reached and did not answer in time; the call
/// may have been charged just before its deadline, never after, see
/// [`RedisConfig::timeout`]), `Unavailable`
/// (connection refused, reset or lost; reconnection is automatic),
/// `Unauthorized` (credentials refused), `Config` (a client set up wrong),
/// `Store` (the server answered with an error),
/// `UnsupportedPolicy` (a quota outside the exact range, see
/// [`RedisBackend::validate`], or a lease of a sliding log), `OutOfRange` (a
/// forced charge that would take the key past that range) or `InvalidKey`.
#[derive(Clone)]
pub struct RedisBackend {
    runner: Runner,
    /// Where the server's clock is, for the deadline each call carries.
    clock: Arc<ServerClock>,
    keys: KeySpace,
    timeout: Duration,
    replay_ttl_ms: u64,
    /// The decisions waiting to be folded into one call, shared by the
    /// clones; `None` when each is sent alone.
    folder: Option<Arc<Folder<Call, RedisResult<Value>>>>,
}

/// What sending the script needs, owned so that a fold in flight can
/// outlive the caller that sent it (its other callers wait for it).
#[derive(Clone)]
struct Runner {
    conn: Conn,
    mode: ScriptMode,
    /// Whether calls go through `EVALSHA`: from the start in
    /// [`ScriptMode::Eval`], from the first server without Functions in
    /// [`ScriptMode::Auto`]; shared by the clones.
    eval: Arc<AtomicBool>,
}

/// One call of the script, ready to be sent alone or in a fold.
pub(crate) struct Call {
    keys: Vec<String>,
    /// The caller's time and the least TTL of a replay; `None` for the
    /// server's clock.
    replay: Option<(u64, u64)>,
    op: &'static str,
    amount: u64,
    policy: Arc<EncodedPolicy>,
    /// The call's deadline on the server's clock (with the server's clock).
    deadline_us: Option<u64>,
}

impl Call {
    /// The script's arguments after the keys (see the library).
    fn push_args(&self, cmd: &mut Cmd) {
        self.push_operation(cmd);
        cmd.arg(self.policy.args());
        if let Some(deadline) = self.deadline_us {
            cmd.arg(deadline);
        }
    }

    /// The arguments before the policy's: the time, the least TTL, the
    /// operation and its amount.
    fn push_operation(&self, cmd: &mut Cmd) {
        match self.replay {
            Some((now_us, ttl_ms)) => cmd.arg(now_us).arg(ttl_ms),
            None => cmd.arg("").arg(0),
        };
        cmd.arg(self.op).arg(self.amount);
    }
}

impl RedisBackend {
    /// Connects to `url` with the defaults of [`RedisConfig`].
    pub async fn connect(url: &str) -> Result<Self, BackendError> {
        RedisConfig::new(url).connect().await
    }

    /// Checks that every limit of `policy` is in the range where the store
    /// decides exactly ([`crate::exact`]); call it where the policy is
    /// made, so a bad quota fails at startup rather than at the first
    /// request (each decision checks again).
    pub fn validate(policy: &Policy) -> Result<(), BackendError> {
        policy.limits().iter().try_for_each(|l| encode(l).map(drop))
    }

    /// Whether calls use Redis Functions (`FCALL`) rather than `EVALSHA`.
    /// In [`ScriptMode::Auto`], Functions until a server turns out not to
    /// have them.
    pub fn uses_functions(&self) -> bool {
        !self.runner.eval.load(Ordering::Relaxed)
    }

    /// The Redis keys holding `key`'s state under `policy` (any bytes; the
    /// [`Backend`] methods take text).
    pub fn redis_keys(
        &self,
        key: impl AsRef<[u8]>,
        policy: &Policy,
    ) -> Result<Vec<String>, BackendError> {
        let stem = self.keys.stem(key.as_ref())?;
        Ok(redis_keys(&stem, &key_suffixes(policy)))
    }

    /// Decides like [`BackendExt::check`](tollgate::BackendExt::check) but
    /// at `now_us` microseconds on the
    /// caller's clock instead of the server's, for replaying a trace. Keys
    /// charged this way live at least the configured replay TTL.
    pub async fn check_at(
        &self,
        key: impl AsRef<[u8]>,
        policy: &Policy,
        cost: u64,
        now_us: u64,
    ) -> Result<Decision, BackendError> {
        let done = self.apply_at(key, policy, Operation::Check(cost), now_us);
        done.await.map(|d| d.decision)
    }

    /// Applies `op` like [`Backend::apply`](tollgate::Backend::apply), but at
    /// `now_us` microseconds on the caller's clock (see
    /// [`RedisBackend::check_at`]). Returns the cost the call charged (a
    /// check's cost when admitted, the forced cost, the leased cost; 0 for a
    /// refund) with the decision.
    pub async fn apply_at(
        &self,
        key: impl AsRef<[u8]>,
        policy: &Policy,
        op: Operation,
        now_us: u64,
    ) -> Result<Lease, BackendError> {
        if now_us > MAX_TIME_US {
            return Err(BackendError::OutOfRange(format!(
                "time {now_us}us is beyond the latest the store computes exactly \
                 ({MAX_TIME_US}us, about the year 2112 on the Unix clock)"
            )));
        }
        let policy = Arc::new(encode_policy(policy)?);
        self.call(key.as_ref(), &policy, op, Some(now_us)).await
    }

    /// One call of the script: `op` on every limit of `policy`, atomically.
    async fn call(
        &self,
        key: &[u8],
        policy: &Arc<EncodedPolicy>,
        op: Operation,
        now_us: Option<u64>,
    ) -> Result<Lease, BackendError> {
        let (name, amount) = encode_operation(op, policy.policy())?;
        let keys = policy.keys(&self.keys.stem(key)?);
        // The server's clock decides (no replayed time): past the deadline,
        // the script charges nothing.
        let deadline_us = match now_us {
            Some(_) => None,
            None => {
                let mut conn = self.runner.conn.clone();
                let clock = self.clock.deadline_us(&mut conn, &keys[0], self.timeout);
                Some(clock.await?)
            }
        };
        let call = Call {
            keys,
            replay: now_us.map(|t| (t, self.replay_ttl_ms)),
            op: name,
            amount,
            policy: policy.clone(),
            deadline_us,
        };
        let peek = op == Operation::Check(0);
        let reply = match &self.folder {
            Some(folder) if deadline_us.is_some() && !peek && self.uses_functions() => {
                let runner = &self.runner;
                let folded = folder.run(call, |calls| runner.clone().send(calls));
                let lost = || {
                    let why = "the call folding this decision was dropped";
                    RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::ConnectionAborted,
                        why,
                    ))
                };
                self.within_deadline(async { folded.await.unwrap_or_else(|| Err(lost())) })
                    .await?
            }
            _ => {
                self.within_deadline(self.runner.script(&call, peek))
                    .await?
            }
        };
        to_lease(&integers(reply)?, policy.policy().limits())
    }

    /// Runs a plain command on the node owning `key`, within the deadline.
    async fn run(&self, cmd: &Cmd, key: &str) -> Result<Value, BackendError> {
        let mut conn = self.runner.conn.clone();
        self.within_deadline(conn.on_key(cmd, key)).await
    }

    async fn within_deadline(
        &self,
        call: impl Future<Output = RedisResult<Value>>,
    ) -> Result<Value, BackendError> {
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| BackendError::Timeout(self.timeout))?
            .map_err(|e| {
                if e.code() == Some(LATE) {
                    // Refused as late while this side still waited: the
                    // estimate of the server's clock is wrong (a failover,
                    // a clock stepped); the next call measures it again.
                    self.clock.forget();
                }
                classify(e, self.timeout)
            })
    }
}

impl Runner {
    /// Runs `call` alone on the node owning its keys. A server that lost
    /// the library (restart, failover, `FUNCTION FLUSH`, or never given it)
    /// gets it loaded, on that node only, and the call is made again; in
    /// [`ScriptMode::Auto`] a server without Functions switches every clone
    /// to `EVALSHA`.
    async fn script(&self, call: &Call, peek: bool) -> RedisResult<Value> {
        let mut conn = self.conn.clone();
        let key = &call.keys[0];
        let mut reloaded = false;
        loop {
            let eval = self.eval.load(Ordering::Relaxed);
            let mut cmd = invocation(eval, peek, &call.keys);
            call.push_args(&mut cmd);
            match conn.on_key(&cmd, key).await {
                Err(e) if lost_script(&e) && !reloaded => {
                    reloaded = true;
                    conn.on_key(&library(eval), key).await?;
                }
                Err(e) if self.switches_to_eval(eval, &e) => {}
                reply => return reply,
            }
        }
    }

    /// Whether `e`, from a call sent with Functions unless `eval`, says the
    /// server has none; it then switches every clone to `EVALSHA`.
    fn switches_to_eval(&self, eval: bool, e: &RedisError) -> bool {
        let switch = !eval && self.mode == ScriptMode::Auto && unknown_command(e);
        if switch {
            self.eval.store(true, Ordering::Relaxed);
        }
        switch
    }

    /// Sends `calls` (on one server, with the server's clock): alone as
    /// one call, else as one fold; one result per call, in order.
    async fn send(self, calls: Vec<Call>) -> Vec<RedisResult<Value>> {
        if let [call] = &calls[..] {
            return vec![self.script(call, false).await];
        }
        let mut conn = self.conn.clone();
        let key = &calls[0].keys[0];
        let mut reloaded = false;
        let reply = loop {
            match conn.on_key_nested(&fold_command(&calls), key).await {
                Err(e) if lost_script(&e) && !reloaded => {
                    reloaded = true;
                    if let Err(e) = conn.on_key(&library(false), key).await {
                        break Err(e);
                    }
                }
                // No Functions after all: each call alone, through EVALSHA.
                Err(e) if self.switches_to_eval(false, &e) => {
                    let alone = calls.iter().map(|c| self.script(c, false));
                    return futures_util::future::join_all(alone).await;
                }
                reply => break reply,
            }
        };
        match reply {
            Ok(Value::Array(replies)) if replies.len() == calls.len() => {
                replies.into_iter().map(Value::extract_error).collect()
            }
            Ok(other) => {
                let e = RedisError::from((
                    ErrorKind::UnexpectedReturnType,
                    "a fold's reply is one per call",
                    format!("{} calls, reply {other:?}", calls.len()),
                ));
                vec![Err(e); calls.len()]
            }
            Err(e) => vec![Err(e); calls.len()],
        }
    }
}

/// `FCALL` of the fold function: every call's keys, each distinct policy
/// once (a fold's calls mostly share one, which the script then reads
/// once), and each call's operation and deadline.
fn fold_command(calls: &[Call]) -> Cmd {
    let mut policies: Vec<&Arc<EncodedPolicy>> = Vec::with_capacity(1);
    let of_call: Vec<usize> = calls
        .iter()
        .map(
            |c| match policies.iter().position(|p| Arc::ptr_eq(p, &c.policy)) {
                Some(i) => i + 1,
                None => {
                    policies.push(&c.policy);
                    policies.len()
                }
            },
        )
        .collect();
    let keys: usize = calls.iter().map(|c| c.keys.len()).sum();
    let args: usize = policies.iter().map(|p| p.args().len()).sum();
    let mut cmd = Cmd::with_capacity(5 + keys + args + 7 * calls.len(), 96 * calls.len());
    cmd.arg("FCALL").arg(script::FOLD_FUNCTION).arg(keys);
    for call in calls {
        cmd.arg(&call.keys);
    }
    cmd.arg(policies.len());
    for policy in policies {
        cmd.arg(policy.args());
    }
    cmd.arg(calls.len());
    for (call, policy) in calls.iter().zip(of_call) {
        cmd.arg(call.keys.len()).arg(policy);
        call.push_operation(&mut cmd);
        match call.deadline_us {
            Some(deadline) => cmd.arg(deadline),
            None => cmd.arg(""),
        };
    }
    cmd
}

/// `FCALL` (`FCALL_RO` of the read-only twin for a peek) or `EVALSHA`
/// with `keys`, arguments to follow.
fn invocation(eval: bool, peek: bool, keys: &[String]) -> Cmd {
    // Sized for a call with a few limits, so building it rarely reallocates.
    let mut cmd = Cmd::with_capacity(16 + 5 * keys.len(), 256);
    match (eval, peek) {
        (true, _) => cmd.arg("EVALSHA").arg(script::eval_sha()),
        (false, false) => cmd.arg("FCALL").arg(script::FUNCTION),
        (false, true) => cmd.arg("FCALL_RO").arg(script::PEEK_FUNCTION),
    };
    cmd.arg(keys.len()).arg(keys);
    cmd
}

/// The command that loads the library (`FUNCTION LOAD REPLACE`) or the
/// `EVAL` script (`SCRIPT LOAD`).
fn library(eval: bool) -> Cmd {
    if eval {
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(script::eval_script())
            .take()
    } else {
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("REPLACE").arg(script::LIBRARY);
        load
    }
}

impl Backend for RedisBackend {
    /// The policy, encoded for the script once (which checks it is in the
    /// exact range).
    type Prepared = Arc<EncodedPolicy>;

    fn prepare(&self, policy: &Policy) -> Result<Self::Prepared, BackendError> {
        encode_policy(policy).map(Arc::new)
    }

    async fn apply(
        &self,
        key: &str,
        policy: &Self::Prepared,
        op: Operation,
    ) -> Result<Outcome, BackendError> {
        if op == Operation::Reset {
            let keys = self.redis_keys(key, policy.policy())?;
            let mut cmd = redis::cmd("DEL");
            cmd.arg(&keys);
            return self.run(&cmd, &keys[0]).await.map(|_| Outcome::Reset);
        }
        let charged = self.call(key.as_bytes(), policy, op, None).await?;
        Ok(op.outcome(charged))
    }
}

/// The script's name of the operation and its amount, which must be an
/// exact double. Amounts beyond 2^53 mean the same as 2^53 for a check, a
/// refund (every stored value is below it) and a lease (capacities are below
/// it); a forced charge that large is refused.
fn encode_operation(op: Operation, policy: &Policy) -> Result<(&'static str, u64), BackendError> {
    op.supported_by(policy)?;
    let exact = |v: u64| v.min(MAX_EXACT as u64);
    Ok(match op {
        Operation::Check(cost) => ("check", exact(cost)),
        Operation::Refund(cost) => ("refund", exact(cost)),
        Operation::Force(cost) if cost as u128 > MAX_EXACT => {
            return Err(BackendError::OutOfRange(format!(
                "a forced charge of {cost} is beyond 2^53, where the store's \
                 arithmetic stops being exact"
            )))
        }
        Operation::Force(cost) => ("force", cost),
        Operation::Lease(max) => ("lease", exact(max)),
        // Deleting the keys needs no script (and no time).
        Operation::Reset => return Err(not_a_charge(op)),
    })
}

/// The error of a reset sent where only charges go (the replaying calls).
fn not_a_charge(op: Operation) -> BackendError {
    BackendError::Config(format!(
        "{op:?} charges nothing and has no time: apply it with Backend::apply"
    ))
}

/// A TLS server whose certificate this client does not trust: the client's
/// configuration (its roots), not the store, must change.
fn untrusted_certificate(e: &RedisError) -> bool {
    e.is_io_error() && e.to_string().contains("invalid peer certificate")
}

fn unknown_command(e: &RedisError) -> bool {
    e.to_string()
        .to_ascii_lowercase()
        .contains("unknown command")
}

/// The error code of a forced charge the script refuses.
const OUT_OF_RANGE: &str = "TOLLGATE_RANGE";

/// The error code of a call the script ran past its deadline (and refused).
const LATE: &str = "TOLLGATE_LATE";

/// The server's clock seen from this process: the offset of its `TIME`
/// from this host's wall clock, so a deadline can be given on the server's
/// clock whatever the two hosts' clocks say. Measured at connect, and again
/// after the server refused as late a call this side was still waiting for;
/// while unknown, a call measures it first.
struct ServerClock {
    /// Microseconds to add to this host's wall clock; `i64::MIN` unknown.
    offset_us: AtomicI64,
}

impl ServerClock {
    const UNKNOWN: i64 = i64::MIN;

    fn unknown() -> Self {
        ServerClock {
            offset_us: AtomicI64::new(Self::UNKNOWN),
        }
    }

    fn forget(&self) {
        self.offset_us.store(Self::UNKNOWN, Ordering::Relaxed);
    }

    /// The deadline of a call starting now, `timeout` from now, on the
    /// server's clock. Unknown, the clock is measured first on the server
    /// owning `key`, within `timeout`: a server that cannot tell the time
    /// in time would not have answered the call in time either, so its
    /// error (or a `Timeout`) is the call's, and nothing is sent without a
    /// deadline.
    async fn deadline_us(
        &self,
        conn: &mut Conn,
        key: &str,
        timeout: Duration,
    ) -> Result<u64, BackendError> {
        let mut offset = self.offset_us.load(Ordering::Relaxed);
        if offset == Self::UNKNOWN {
            offset = tokio::time::timeout(timeout, self.measure(conn, key))
                .await
                .map_err(|_| BackendError::Timeout(timeout))?
                .map_err(|e| classify(e, timeout))?;
        }
        let timeout = i64::try_from(timeout.as_micros()).unwrap_or(i64::MAX);
        let deadline = wall_clock_us()
            .saturating_add(offset)
            .saturating_add(timeout);
        Ok(u64::try_from(deadline).unwrap_or(0))
    }

    /// Reads the server's `TIME` on the node owning `key` and keeps its
    /// offset from the middle of the round trip.
    async fn measure(&self, conn: &mut Conn, key: &str) -> RedisResult<i64> {
        let before = wall_clock_us();
        let reply = conn.on_key(&redis::cmd("TIME"), key).await?;
        let after = wall_clock_us();
        let (secs, micros): (i64, i64) = redis::from_redis_value(reply)?;
        let server = secs.saturating_mul(1_000_000).saturating_add(micros);
        let offset = server - (before + (after - before) / 2);
        self.offset_us.store(offset, Ordering::Relaxed);
        Ok(offset)
    }
}

/// Microseconds on this host's wall clock (the one the server's `TIME` is
/// compared with).
fn wall_clock_us() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
}

fn lost_script(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
        || e.to_string().contains("Function not found")
}

/// Maps a client error onto the kinds a caller chooses fail-open or
/// fail-closed by.
fn classify(e: RedisError, deadline: Duration) -> BackendError {
    if e.code() == Some(OUT_OF_RANGE) {
        BackendError::OutOfRange(e.detail().unwrap_or_default().to_string())
    } else if e.code() == Some(LATE) {
        BackendError::Timeout(deadline)
    } else if e.kind() == ErrorKind::InvalidClientConfig || untrusted_certificate(&e) {
        BackendError::Config(e.to_string())
    } else if e.kind() == ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
    {
        BackendError::Unauthorized(e.to_string())
    } else if e.is_timeout() {
        BackendError::Timeout(deadline)
    } else if e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
            ) | ErrorKind::ClusterConnectionNotFound
        )
    {
        BackendError::Unavailable(e.to_string())
    } else {
        BackendError::Store(e.to_string())
    }
}

/// The script's integers: an array from a call alone, packed as
/// little-endian doubles in one string from a fold.
fn integers(reply: Value) -> Result<Vec<i64>, BackendError> {
    match reply {
        Value::BulkString(packed) if packed.len() % 8 == 0 => Ok(packed
            .chunks_exact(8)
            .map(|d| {
                let mut bytes = [0; 8];
                bytes.copy_from_slice(d);
                f64::from_le_bytes(bytes) as i64
            })
            .collect()),
        reply => redis::from_redis_value(reply)
            .map_err(|e| BackendError::Store(format!("unexpected reply: {e}"))),
    }
}

/// The script's reply (`all_allowed`, the cost charged, then five integers
/// per limit, times in microseconds) as the cost charged and the core's
/// merged decision.
fn to_lease(reply: &[i64], limits: &[Limit]) -> Result<Lease, BackendError> {
    if reply.len() != 2 + 5 * limits.len() {
        return Err(BackendError::Store(format!(
            "expected {} integers from the script, got {}",
            2 + 5 * limits.len(),
            reply.len()
        )));
    }
    let ns = |us: i64| u64::try_from(us).unwrap_or(0).saturating_mul(1000);
    let decision = limits
        .iter()
        .zip(reply[2..].chunks_exact(5))
        .map(|(limit, r)| Decision {
            allowed: r[0] == 1,
            limit: limit.capacity(),
            remaining: u64::try_from(r[1]).unwrap_or(0),
            retry_after: match r[2] {
                -1 => RetryAfter::Never,
                0 => RetryAfter::Now,
                us => RetryAfter::After(ns(us)),
            },
            reset_after: ns(r[3]),
            delay: ns(r[4]),
        })
        .reduce(Decision::most_restrictive)
        .ok_or_else(|| BackendError::Store("a policy without limits".into()))?;
    Ok(Lease {
        granted: u64::try_from(reply[1]).unwrap_or(0),
        decision,
    })
}
