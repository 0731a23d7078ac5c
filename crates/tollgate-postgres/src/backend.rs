//! [`PostgresBackend`]: the [`Backend`] of `tollgate` on PostgreSQL.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{NoTls, Socket};
use tollgate::{Backend, BackendError, Operation, Outcome, Policy};
use tollgate_core::{Decision, Lease, Limit, RetryAfter};

use crate::encoding::{
    bucket_charge, bucket_limit, encode, encode_operation, stored_key, EncodedPolicy,
};
use crate::errors::{classify, from_pool};
use crate::numeric::{Integer, Numeric};
use crate::schema::{self, ChargeClock, Migration, Names, DEFAULT_SCHEMA, DEFAULT_TABLE};

/// Default deadline of every decision (waiting for a connection included).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

/// Default deadline of connecting and of migrating the schema.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Default number of pooled connections.
pub const DEFAULT_POOL_SIZE: usize = 16;

/// Default interval of the idle-row cleanup.
pub const DEFAULT_CLEANUP_EVERY: Duration = Duration::from_secs(10);

/// Default number of rows one cleanup statement deletes at most.
pub const DEFAULT_CLEANUP_BATCH: u32 = 1000;

/// Default least time rows charged by [`PostgresBackend::check_at`] are kept:
/// replayed times are not the database's clock.
pub const DEFAULT_REPLAY_FLOOR: Duration = Duration::from_secs(3600);

/// Cleanup statements per interval at most, so one pass stays bounded.
const CLEANUP_BATCHES_PER_PASS: usize = 10;

/// The parameter types of the `_apply` statement, fixed so the driver
/// prepares it once per connection.
const APPLY_TYPES: [Type; 8] = [
    Type::TEXT,
    Type::INT8,
    Type::INT8_ARRAY,
    Type::INT2,
    Type::NUMERIC,
    Type::INT8,
    Type::INT8,
    Type::INT8,
];

/// The parameter types of the one-statement charge on the database clock:
/// key, policy, the cost in ticks as `numeric` (the statement computes with
/// it, uncast) and the caller's deadline, compared with the statement's
/// start as it is.
const CHARGE_TYPES: [Type; 4] = [Type::TEXT, Type::INT8, Type::NUMERIC, Type::TIMESTAMPTZ];

/// The same at a replayed time: the time, in ns, instead of the deadline.
const REPLAYED_CHARGE_TYPES: [Type; 4] = [Type::TEXT, Type::INT8, Type::NUMERIC, Type::NUMERIC];

/// How to reach PostgreSQL and how to use it; [`PostgresConfig::connect`]
/// makes a [`PostgresBackend`].
#[derive(Clone)]
pub struct PostgresConfig {
    url: String,
    schema: String,
    table: String,
    prefix: String,
    timeout: Duration,
    connect_timeout: Duration,
    pool_size: usize,
    migrate: bool,
    cleanup_every: Option<Duration>,
    cleanup_batch: u32,
    replay_floor: Duration,
}

/// Shows everything but the URL, which may hold a password.
impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &"<hidden>")
            .field("schema", &self.schema)
            .field("table", &self.table)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("pool_size", &self.pool_size)
            .field("migrate", &self.migrate)
            .field("cleanup_every", &self.cleanup_every)
            .field("cleanup_batch", &self.cleanup_batch)
            .field("replay_floor", &self.replay_floor)
            .finish()
    }
}

impl PostgresConfig {
    /// Defaults for `url`, a libpq connection string or URL
    /// (`postgres://user:password@host:port/db`, `host=... user=...`).
    pub fn new(url: impl Into<String>) -> Self {
        PostgresConfig {
            url: url.into(),
            schema: DEFAULT_SCHEMA.into(),
            table: DEFAULT_TABLE.into(),
            prefix: String::new(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            pool_size: DEFAULT_POOL_SIZE,
            migrate: true,
            cleanup_every: Some(DEFAULT_CLEANUP_EVERY),
            cleanup_batch: DEFAULT_CLEANUP_BATCH,
            replay_floor: DEFAULT_REPLAY_FLOOR,
        }
    }

    /// Schema of the table and its functions (default `tollgate`).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The state table (default `state`).
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Prepended to every key (default none), to keep applications apart.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Deadline of each call, waiting for a pooled connection included
    /// (default 50 ms). Also every connection's `statement_timeout`, so a
    /// statement stuck on a lock is cancelled in the server too; and each
    /// statement carries it on the database clock (its offset from this
    /// host's measured at connect), so one that starts late (held in a
    /// paused or overloaded server) charges nothing.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Deadline of connecting (each new pooled connection too) and of
    /// migrating the schema (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Pooled connections at most (default 16).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// Whether [`connect`](Self::connect) creates or upgrades the schema
    /// (default `true`); without it, run `tollgate migrate` first.
    pub fn migrate(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// How often idle rows are deleted (default every 10 s), or `None` for
    /// never (call [`PostgresBackend::cleanup`] yourself).
    pub fn cleanup_every(mut self, every: Option<Duration>) -> Self {
        self.cleanup_every = every;
        self
    }

    /// Rows one cleanup statement deletes at most (default 1000).
    pub fn cleanup_batch(mut self, batch: u32) -> Self {
        self.cleanup_batch = batch.max(1);
        self
    }

    /// Least time rows charged with replayed times are kept (default 1 h).
    pub fn replay_floor(mut self, floor: Duration) -> Self {
        self.replay_floor = floor;
        self
    }

    /// Connects without TLS (see [`connect_tls`](Self::connect_tls)).
    pub async fn connect(self) -> Result<PostgresBackend, BackendError> {
        self.connect_tls(NoTls).await
    }

    /// Connects with `tls`, any `tokio-postgres` TLS connector (for example
    /// from `postgres-native-tls` or `tokio-postgres-rustls`), checks the
    /// server and, unless turned off, migrates the schema; all within the
    /// connect deadline.
    pub async fn connect_tls<T>(self, tls: T) -> Result<PostgresBackend, BackendError>
    where
        T: MakeTlsConnect<Socket> + Clone + Sync + Send + 'static,
        T::Stream: Sync + Send,
        T::TlsConnect: Sync + Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        let names = Names::new(&self.schema, &self.table)?;
        let pool = self.pool(tls)?;
        // A first connection, so that a bad URL or a down server fails here.
        let clock_offset_ns = self
            .within_connect_deadline(async {
                let mut client = self.first_client(&pool).await?;
                if self.migrate {
                    schema::migrate(&mut client, &names, self.connect_timeout).await?;
                }
                clock_offset_ns(&client, self.connect_timeout).await
            })
            .await?;
        let cleanup = self.cleanup_every.map(|every| {
            let task = tokio::spawn(clean_periodically(
                pool.clone(),
                names.cleanup_sql(),
                every,
                self.cleanup_batch,
            ));
            Arc::new(AbortOnDrop(task))
        });
        Ok(PostgresBackend {
            pool,
            sql: Arc::new(Statements {
                apply: names.apply_sql(),
                reset: names.reset_sql(),
                cleanup: names.cleanup_sql(),
            }),
            names,
            prefix: self.prefix.into(),
            timeout: self.timeout,
            clock_offset_ns,
            replay_floor_ns: i64::try_from(self.replay_floor.as_nanos()).unwrap_or(i64::MAX),
            _cleanup: cleanup,
        })
    }

    /// Creates or upgrades the schema and returns (for `tollgate migrate`),
    /// over one connection without TLS.
    pub async fn run_migrations(self) -> Result<Migration, BackendError> {
        let names = Names::new(&self.schema, &self.table)?;
        let pool = self.pool(NoTls)?;
        self.within_connect_deadline(async {
            let mut client = self.first_client(&pool).await?;
            schema::migrate(&mut client, &names, self.connect_timeout).await
        })
        .await
    }

    async fn first_client(&self, pool: &Pool) -> Result<deadpool_postgres::Object, BackendError> {
        pool.get()
            .await
            .map_err(|e| from_pool(e, self.connect_timeout))
    }

    async fn within_connect_deadline<T>(
        &self,
        setup: impl Future<Output = Result<T, BackendError>>,
    ) -> Result<T, BackendError> {
        tokio::time::timeout(self.connect_timeout, setup)
            .await
            .map_err(|_| BackendError::Timeout(self.connect_timeout))?
    }

    fn pool<T>(&self, tls: T) -> Result<Pool, BackendError>
    where
        T: MakeTlsConnect<Socket> + Clone + Sync + Send + 'static,
        T::Stream: Sync + Send,
        T::TlsConnect: Sync + Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        // The parser's messages may quote the string, password included.
        let mut pg: tokio_postgres::Config = self.url.parse().map_err(|_| {
            BackendError::Unavailable(
                "the store URL is not a valid PostgreSQL connection string \
                 (postgres://user[:password]@host[:port]/database)"
                    .into(),
            )
        })?;
        let statement_timeout = format!(
            "-c statement_timeout={}",
            self.timeout.as_millis().clamp(1, i32::MAX as u128)
        );
        let options = match pg.get_options() {
            Some(given) => format!("{given} {statement_timeout}"),
            None => statement_timeout,
        };
        pg.options(&options)
            .application_name("tollgate")
            .connect_timeout(self.connect_timeout);
        let manager = Manager::from_config(
            pg,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        Pool::builder(manager)
            .max_size(self.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(self.timeout))
            .create_timeout(Some(self.connect_timeout))
            .recycle_timeout(Some(self.timeout))
            .build()
            .map_err(|e| BackendError::Store(format!("cannot build the connection pool: {e}")))
    }
}

/// Rate limiting in PostgreSQL: each operation is one statement, a call of
/// the schema's `_apply` function that locks the key's row, reads the
/// database clock and decides every limit of the policy atomically, with
/// the exact decisions and numbers of the core (to the nanosecond).
///
/// Calls have a deadline and fail with a typed [`BackendError`]: `Timeout`
/// (the deadline, `statement_timeout` or waiting for a pooled connection),
/// `Unavailable` (down, restarting, refusing connections or read-only),
/// `Store` (any other server error) or `InvalidKey`. Cloning is cheap and
/// shares the pool.
#[derive(Clone)]
pub struct PostgresBackend {
    pool: Pool,
    sql: Arc<Statements>,
    names: Names,
    prefix: Arc<str>,
    timeout: Duration,
    /// The database clock minus this host's wall clock, measured at
    /// connect: each call's deadline is given on the database clock.
    clock_offset_ns: i64,
    replay_floor_ns: i64,
    _cleanup: Option<Arc<AbortOnDrop>>,
}

struct Statements {
    apply: String,
    reset: String,
    cleanup: String,
}

/// Stops the cleanup task with the last clone of the backend.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl PostgresBackend {
    /// Connects to `url` with the defaults of [`PostgresConfig`].
    pub async fn connect(url: &str) -> Result<Self, BackendError> {
        PostgresConfig::new(url).connect().await
    }

    /// The state table, `schema.table`.
    pub fn table(&self) -> String {
        self.names.qualified()
    }

    /// The connection pool, for the caller's own queries.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Decides like [`BackendExt::check`](tollgate::BackendExt::check) but
    /// at `now_ns` on the caller's clock
    /// instead of the database's, for replaying a trace: any time below
    /// 2^63 ns, decided exactly as the core would. Rows charged this way are
    /// kept at least the configured replay floor.
    pub async fn check_at(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
        now_ns: u64,
    ) -> Result<Decision, BackendError> {
        let done = self.apply_at(key, policy, Operation::Check(cost), now_ns);
        Ok(done.await?.decision)
    }

    /// Any [`Operation`] at `now_ns` on the caller's clock (see
    /// [`check_at`](Self::check_at)), reported as a [`Lease`]: the cost
    /// charged (the request's when admitted, the grant of a lease, the
    /// amount of a forced charge; 0 otherwise) and the key's numbers.
    pub async fn apply_at(
        &self,
        key: &str,
        policy: &Policy,
        op: Operation,
        now_ns: u64,
    ) -> Result<Lease, BackendError> {
        let now = i64::try_from(now_ns).map_err(|_| {
            BackendError::Store(format!(
                "time {now_ns}ns is beyond the store's range (below 2^63 ns)"
            ))
        })?;
        let prepared = PreparedPolicy::new(policy, &self.names);
        self.apply(key, &prepared, op, Some(now), self.replay_floor_ns)
            .await
    }

    /// Deletes up to `batch` rows that are back to a fresh key's state on
    /// the database clock; returns how many. Runs every
    /// [`PostgresConfig::cleanup_every`] on its own.
    pub async fn cleanup(&self, batch: u32) -> Result<u64, BackendError> {
        self.cleanup_at(batch, None).await
    }

    /// [`cleanup`](Self::cleanup) as of `now_ns` instead of the database
    /// clock (rows written by [`check_at`](Self::check_at) live on the
    /// trace's times).
    pub async fn cleanup_at(&self, batch: u32, now_ns: Option<i64>) -> Result<u64, BackendError> {
        let batch = i32::try_from(batch).unwrap_or(i32::MAX);
        let run = async {
            let client = self.client().await?;
            let row = client
                .query_one(&self.sql.cleanup, &[&batch, &now_ns])
                .await
                .map_err(|e| classify(&e, self.timeout))?;
            Ok(row.get::<_, i64>(0) as u64)
        };
        self.within_deadline(run).await
    }

    /// Deletes `key`'s row under `policy`.
    async fn reset(&self, key: &str, policy: &PreparedPolicy) -> Result<(), BackendError> {
        let key = stored_key(&self.prefix, key)?;
        let id = policy.encoded.id;
        let run = async {
            let client = self.client().await?;
            client
                .execute(&self.sql.reset, &[&key, &id])
                .await
                .map_err(|e| classify(&e, self.timeout))
        };
        self.within_deadline(run).await.map(drop)
    }

    /// One operation on `key` under `policy`, one round trip.
    async fn apply(
        &self,
        key: &str,
        prepared: &PreparedPolicy,
        op: Operation,
        now: Option<i64>,
        floor_ns: i64,
    ) -> Result<Lease, BackendError> {
        let PreparedPolicy {
            policy,
            encoded,
            charge,
        } = prepared;
        let (code, amount) = encode_operation(op, policy)?;
        let key = stored_key(&self.prefix, key)?;
        // Past it, the statement charges nothing (only on the database's
        // own clock: replayed times carry none).
        let deadline = now.is_none().then(|| {
            let timeout = i64::try_from(self.timeout.as_nanos()).unwrap_or(i64::MAX);
            wall_clock_ns()
                .saturating_add(self.clock_offset_ns)
                .saturating_add(timeout)
        });
        // The one-statement charge, with its statement: the policy's own on
        // the database clock, one made for the replayed time's floor.
        let one_statement = bucket_charge(op, policy).and_then(|bucket| {
            let sql = match now {
                None => Cow::Borrowed(charge.as_deref()?),
                Some(_) => Cow::Owned(self.names.charge_sql(
                    &bucket.limit,
                    ChargeClock::Replayed {
                        floor_ns: u64::try_from(floor_ns).unwrap_or(0),
                    },
                )),
            };
            Some((sql, bucket))
        });
        // Its last parameter: the deadline as a timestamp (to the
        // microsecond), as the statement's start is read, or the replayed
        // time (not negative: `apply_at` took it from a `u64`).
        let deadline_at =
            deadline.map(|ns| UNIX_EPOCH + Duration::from_nanos(u64::try_from(ns).unwrap_or(0)));
        let replayed = now.map(|ns| Numeric(u128::try_from(ns).unwrap_or(0)));
        let (charge_types, charge_at): (&[Type], &(dyn ToSql + Sync)) = match &replayed {
            None => (&CHARGE_TYPES, &deadline_at),
            Some(at) => (&REPLAYED_CHARGE_TYPES, at),
        };
        let run = async {
            let client = self.client().await?;
            let db = |e: tokio_postgres::Error| classify(&e, self.timeout);
            if let Some((sql, bucket)) = one_statement {
                // One plain UPDATE admits most charges; a denial or a new
                // key falls through to the function, which explains it.
                let statement = client
                    .prepare_typed_cached(&sql, charge_types)
                    .await
                    .map_err(db)?;
                let cost = Numeric(bucket.cost_ticks());
                let args: [&(dyn ToSql + Sync); 4] = [&key, &encoded.id, &cost, charge_at];
                let row = client.query_opt(&statement, &args).await.map_err(db)?;
                if let Some(row) = row {
                    let state: Vec<Integer> = row.try_get(0).map_err(db)?;
                    return bucket.answer(&state).map(Vec::from);
                }
            }
            let statement = client
                .prepare_typed_cached(&self.sql.apply, &APPLY_TYPES)
                .await
                .map_err(db)?;
            let row = client
                .query_one(
                    &statement,
                    &[
                        &key,
                        &encoded.id,
                        &encoded.limits,
                        &code,
                        &Numeric(amount.into()),
                        &now,
                        &floor_ns,
                        &deadline,
                    ],
                )
                .await
                .map_err(db)?;
            let values: Vec<Integer> = row.try_get(0).map_err(db)?;
            Ok(values)
        };
        let values = self.within_deadline(run).await?;
        to_applied(&values, policy.limits())
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, BackendError> {
        self.pool
            .get()
            .await
            .map_err(|e| from_pool(e, self.timeout))
    }

    async fn within_deadline<T>(
        &self,
        call: impl Future<Output = Result<T, BackendError>>,
    ) -> Result<T, BackendError> {
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| BackendError::Timeout(self.timeout))?
    }
}

/// The database clock minus this host's wall clock, from the middle of one
/// round trip.
async fn clock_offset_ns(
    client: &tokio_postgres::Client,
    deadline: Duration,
) -> Result<i64, BackendError> {
    let before = wall_clock_ns();
    let row = client
        .query_one(schema::CLOCK_SQL, &[])
        .await
        .map_err(|e| classify(&e, deadline))?;
    let after = wall_clock_ns();
    let database: i64 = row.get(0);
    Ok(database - (before + (after - before) / 2))
}

/// Nanoseconds on this host's wall clock.
fn wall_clock_ns() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
}

/// A policy as [`PostgresBackend`] keeps it once prepared: with its id
/// and limits as the database takes them, and the one-statement charge of a
/// single bucket-family limit with its numbers written in, made once rather
/// than per call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedPolicy {
    policy: Policy,
    encoded: EncodedPolicy,
    /// The one-statement charge on the database clock, for a policy of one
    /// limit of the bucket family.
    charge: Option<String>,
}

impl PreparedPolicy {
    fn new(policy: &Policy, names: &Names) -> Self {
        PreparedPolicy {
            policy: policy.clone(),
            encoded: encode(policy),
            charge: bucket_limit(policy)
                .map(|limit| names.charge_sql(&limit, ChargeClock::Database)),
        }
    }
}

/// A prepared policy reads as the policy itself, as it did when it was one.
impl std::ops::Deref for PreparedPolicy {
    type Target = Policy;

    fn deref(&self) -> &Policy {
        &self.policy
    }
}

impl Backend for PostgresBackend {
    /// The policy with its id: every quota the core accepts is exact here
    /// (`numeric` arithmetic), so there is nothing to refuse.
    type Prepared = Arc<PreparedPolicy>;

    fn prepare(&self, policy: &Policy) -> Result<Self::Prepared, BackendError> {
        Ok(Arc::new(PreparedPolicy::new(policy, &self.names)))
    }

    async fn apply(
        &self,
        key: &str,
        policy: &Self::Prepared,
        op: Operation,
    ) -> Result<Outcome, BackendError> {
        if op == Operation::Reset {
            return self.reset(key, policy).await.map(|()| Outcome::Reset);
        }
        let charged = PostgresBackend::apply(self, key, policy, op, None, 0).await?;
        Ok(op.outcome(charged))
    }
}

/// Deletes idle rows every `every`, a bounded number of batches at a time;
/// failures are left for the next pass (decisions report them).
async fn clean_periodically(pool: Pool, sql: String, every: Duration, batch: u32) {
    let batch = i32::try_from(batch).unwrap_or(i32::MAX);
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Ok(client) = pool.get().await else {
            continue;
        };
        for _ in 0..CLEANUP_BATCHES_PER_PASS {
            match client.query_one(&sql, &[&batch, &None::<i64>]).await {
                Ok(row) if row.get::<_, i64>(0) == batch as i64 => continue,
                _ => break,
            }
        }
    }
}

/// The function's answer (`[all allowed, charged, then allowed, remaining,
/// retry (-1 never), reset, delay per limit]`) as the merged decision.
fn to_applied(values: &[Integer], limits: &[Limit]) -> Result<Lease, BackendError> {
    if values.len() != 2 + 5 * limits.len() {
        return Err(BackendError::Store(format!(
            "expected {} numbers from the database, got {}",
            2 + 5 * limits.len(),
            values.len()
        )));
    }
    let u64_of = |v: &Integer| {
        u64::try_from(v.0)
            .map_err(|_| BackendError::Store(format!("{} is out of range from the database", v.0)))
    };
    let mut merged: Option<Decision> = None;
    for (limit, r) in limits.iter().zip(values[2..].chunks_exact(5)) {
        let allowed = r[0].0 == 1;
        let decision = Decision {
            allowed,
            limit: limit.capacity(),
            remaining: u64_of(&r[1])?,
            retry_after: match r[2].0 {
                _ if allowed => RetryAfter::Now,
                -1 => RetryAfter::Never,
                _ => RetryAfter::After(u64_of(&r[2])?),
            },
            reset_after: u64_of(&r[3])?,
            delay: u64_of(&r[4])?,
        };
        merged = Some(match merged {
            Some(m) => m.most_restrictive(decision),
            None => decision,
        });
    }
    Ok(Lease {
        granted: u64_of(&values[1])?,
        decision: merged.ok_or_else(|| BackendError::Store("a policy without limits".into()))?,
    })
}
