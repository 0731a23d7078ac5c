//! The client side: calling a rate-limited API without collecting 429s.
//!
//! An [`Outbound`] holds what every adapter shares: a [`Shaper`] (each key,
//! by default the upstream host, waits for its budget before a request goes
//! out, and pauses until the reset a server announced, read by
//! [`learn`](crate::learn)), the [`Retry`] rules and a [`RetryBudget`].
//! [`OutboundLayer`] applies it to any tower HTTP client (hyper-util's
//! `Client`); with the `reqwest` feature, [`OutboundMiddleware`] to a
//! `reqwest-middleware` client.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Algorithm, Limit, Quota};
//! use tollgate_http::client::{Outbound, OutboundMiddleware};
//! // At most 50 requests a minute per host, evenly spread; 429/503 retried within a 10% budget.
//! let limit = Limit::new(Algorithm::Gcra, Quota::per_minute(50)?);
//! let outbound = Outbound::new(limit)?.deadline(Duration::from_secs(20)).idempotency_keys(true);
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(OutboundMiddleware::new(outbound)).build();
//! // let answer = client.post("https://api.example.com/v1/orders").send().await?;
//! # let _ = client;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! For hyper-util's `Client` (or any tower HTTP client), the same
//! `Outbound` goes in an [`OutboundLayer`]:
//! `ServiceBuilder::new().layer(OutboundLayer::new(outbound)).service(client)`.
//!
//! Per request, in order:
//!
//! 1. wait until the key's budget admits the cost, no pause holds it and
//!    its pace gives it a slot, or fail at once with [`ShapeError`] if it
//!    can never fit or the wait would pass the deadline;
//! 2. send, and learn from the answer's headers (the server's rate, what it
//!    has left, a spent budget; a reported cost, see
//!    [`Outbound::reconcile`], is settled);
//! 3. on 429 or 503 (or a connection error, if [`Retry::connection_errors`]),
//!    retry after the pause the answer calls for or an exponential backoff
//!    with full jitter, while attempts, total time and the retry budget
//!    allow, and only if the method is idempotent or the request has an
//!    `Idempotency-Key` ([`Outbound::idempotency_keys`] adds one to requests
//!    without).
//!
//! What the defaults do, for many tasks sharing one `Outbound`:
//!
//! - **Evenly spread**: a key's requests leave one interval apart, never
//!   together, even when the policy has a burst (`Quota::per_minute(50)`
//!   allows 50 at once; the client still sends one every 1.2 s). Requests
//!   waiting together are released one by one, each slot decided when it
//!   comes (nothing is booked ahead on what was known earlier).
//! - **The server's rate**: the interval is the slower of the policy's and
//!   the one the server announces in `RateLimit-Policy` (`q` per `w`
//!   seconds), plus a 5% headroom ([`Outbound::headroom`]) so network
//!   jitter does not bunch requests past its limit: against `q=20;w=1`,
//!   one every 52.5 ms, 19 a second.
//! - **Holding back**: when the last answer said nothing is left (`r=0` in
//!   `RateLimit`, or a vendor's `remaining` of 0), the next request waits
//!   one interval after that answer for every request still in flight, as
//!   those take the server's next units first.
//! - **Pauses**: a 429 or 503, or a spent budget, pauses the key for the
//!   longer of `Retry-After` and the spent limit's reset. The fields count
//!   whole seconds, so a wait of 1 s or less from a server whose rate is
//!   known is replaced: by one interval for a refusal (doubling with each
//!   refusal in a row, up to the second), by the holding back above for an
//!   admitted request. Longer waits are taken as told.
//! - **Bursts only when asked**: [`Outbound::bursts`]`(true)` lets requests
//!   go within the policy's own burst and, while the server's last answer
//!   reports units left, without waiting for the interval.
//!
//! The rate is learned from `RateLimit-Policy` and from OpenAI's and
//! Anthropic's request limits (per minute); GitHub's fields give what is
//! left and when it resets, which feed the holding back and the pauses,
//! but no rate to pace by.
//!
//! `cargo run -p tollgate-http --example many_tasks -- URL TASKS REQUESTS RATE`
//! runs many tasks through one `Outbound`; the README shows it against
//! `tollgate serve`.

mod pace;
mod retry;
mod shape;
mod tower;

#[cfg(feature = "reqwest")]
mod reqwest;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderValue, Method, StatusCode};
use tollgate::{AsyncClock, MonotonicClock, Policy, QuotaError};

use crate::learn::{learn, DEFAULT_MAX_PAUSE};

#[cfg(feature = "reqwest")]
pub use self::reqwest::OutboundMiddleware;
pub use self::tower::{OutboundLayer, OutboundService};
pub use retry::{may_retry, retryable_status, Budget, Retry, RetryBudget, IDEMPOTENCY_KEY};
pub use shape::{Sent, ShapeError, Shaper};

/// What the key and cost functions see of an outgoing request.
#[derive(Clone, Copy, Debug)]
pub struct Outgoing<'a> {
    /// The method.
    pub method: &'a Method,
    /// The upstream host (empty if the URL has none).
    pub host: &'a str,
    /// The path.
    pub path: &'a str,
    /// The headers.
    pub headers: &'a HeaderMap,
    /// Whether the request can be sent again (its body can be copied).
    pub replayable: bool,
}

/// What the retry loop needs of a response.
pub trait Answer {
    /// The status.
    fn status(&self) -> StatusCode;
    /// The headers.
    fn headers(&self) -> &HeaderMap;
}

impl<B> Answer for http::Response<B> {
    fn status(&self) -> StatusCode {
        self.status()
    }
    fn headers(&self) -> &HeaderMap {
        self.headers()
    }
}

/// The error of a shaped call: not sent, or the transport's own error.
#[derive(Debug, thiserror::Error)]
pub enum ClientError<E> {
    /// The request was not sent (see [`ShapeError`]).
    #[error(transparent)]
    Shaped(ShapeError),
    /// The inner client failed.
    #[error(transparent)]
    Upstream(E),
}

type KeyFn = Arc<dyn Fn(&Outgoing<'_>) -> String + Send + Sync>;
type CostFn = Arc<dyn Fn(&Outgoing<'_>) -> u64 + Send + Sync>;
type ReportFn = Arc<dyn Fn(&HeaderMap) -> Option<u64> + Send + Sync>;

/// Shaping, learning and retries for outgoing requests, shared by the
/// adapters (see the [module docs](self)).
pub struct Outbound<C: AsyncClock = MonotonicClock> {
    shaper: Shaper<C>,
    retry: Retry,
    budget: RetryBudget<C>,
    deadline: Duration,
    max_pause: Duration,
    add_keys: bool,
    key: KeyFn,
    cost: CostFn,
    reported: Option<ReportFn>,
    rng: Mutex<fastrand::Rng>,
}

impl Outbound<MonotonicClock> {
    /// Shaping by `policy` per upstream host, cost 1, default [`Retry`] and
    /// [`Budget`], a 30 s deadline and pauses of at most one hour.
    pub fn new(policy: impl Into<Policy>) -> Result<Self, QuotaError> {
        Outbound::with_clock(policy, MonotonicClock::new())
    }
}

impl<C: AsyncClock + Clone> Outbound<C> {
    /// As [`Outbound::new`], on `clock`.
    pub fn with_clock(policy: impl Into<Policy>, clock: C) -> Result<Self, QuotaError> {
        Ok(Outbound {
            budget: RetryBudget::new(Budget::default(), clock.clone())?,
            shaper: Shaper::with_clock(policy, clock),
            retry: Retry::default(),
            deadline: Duration::from_secs(30),
            max_pause: DEFAULT_MAX_PAUSE,
            add_keys: false,
            key: Arc::new(|out| out.host.to_string()),
            cost: Arc::new(|_| 1),
            reported: None,
            rng: Mutex::new(fastrand::Rng::new()),
        })
    }

    /// The retry rules.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// The retry budget's shape.
    pub fn budget(mut self, budget: Budget) -> Result<Self, QuotaError> {
        self.budget = RetryBudget::new(budget, self.shaper.clock().clone())?;
        Ok(self)
    }

    /// Whether requests may go in bursts (see [`Shaper::bursts`]); by
    /// default they leave one interval apart.
    pub fn bursts(mut self, bursts: bool) -> Self {
        self.shaper = self.shaper.bursts(bursts);
        self
    }

    /// The pace kept below a server's announced rate, percent (see
    /// [`Shaper::headroom`]; default 5).
    pub fn headroom(mut self, percent: u64) -> Self {
        self.shaper = self.shaper.headroom(percent);
        self
    }

    /// The longest a request waits for its budget, retries included.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The longest pause taken on a server's word (its headers).
    pub fn max_pause(mut self, max_pause: Duration) -> Self {
        self.max_pause = max_pause;
        self
    }

    /// Whether a request that is not idempotent and has no
    /// `Idempotency-Key` gets a fresh random one, so it can be retried.
    pub fn idempotency_keys(mut self, add: bool) -> Self {
        self.add_keys = add;
        self
    }

    /// The key a request is shaped under (default: its host).
    pub fn key(mut self, key: impl Fn(&Outgoing<'_>) -> String + Send + Sync + 'static) -> Self {
        self.key = Arc::new(key);
        self
    }

    /// The cost a request is charged before it goes (default: 1).
    pub fn cost(mut self, cost: impl Fn(&Outgoing<'_>) -> u64 + Send + Sync + 'static) -> Self {
        self.cost = Arc::new(cost);
        self
    }

    /// Reads the real cost from a response (LLM tokens used): the
    /// difference from the charged cost is refunded or force-charged.
    pub fn reconcile(
        mut self,
        reported: impl Fn(&HeaderMap) -> Option<u64> + Send + Sync + 'static,
    ) -> Self {
        self.reported = Some(Arc::new(reported));
        self
    }

    /// The shaper, to pause a key or inspect it.
    pub fn shaper(&self) -> &Shaper<C> {
        &self.shaper
    }

    /// Adds an `Idempotency-Key` if configured and the request needs one.
    pub fn prepare(&self, method: &Method, headers: &mut HeaderMap) {
        if self.add_keys && !may_retry(method, headers) {
            let key = {
                let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
                format!("{:032x}", rng.u128(..))
            };
            let value = HeaderValue::from_str(&key).expect("hex digits are a valid header value");
            headers.insert(IDEMPOTENCY_KEY, value);
        }
    }

    /// Sends one request through shaping, learning and retries: `send`
    /// makes one attempt (a fresh copy of the request each time);
    /// `connection_error` says whether an error may be retried as one.
    pub async fn send<R, E, F, Fut>(
        &self,
        out: &Outgoing<'_>,
        mut send: F,
        connection_error: impl Fn(&E) -> bool,
    ) -> Result<R, ClientError<E>>
    where
        R: Answer,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        let clock = self.shaper.clock();
        let key = (self.key)(out);
        let cost = (self.cost)(out);
        let retriable = out.replayable && may_retry(out.method, out.headers);
        let start = clock.now();
        let give_up = start.saturating_add(shape::nanos(self.deadline));
        let stop_retrying = start.saturating_add(shape::nanos(self.retry.max_total));
        self.budget.deposit();
        let within = |now: u64| Duration::from_nanos(give_up.saturating_sub(now));
        let mut sent = self
            .shaper
            .admit(&key, cost, within(clock.now()))
            .await
            .map_err(ClientError::Shaped)?;
        let mut attempt = 1;
        loop {
            let result = send().await;
            let (again, told) = match &result {
                Ok(answer) => {
                    let learned = learn(answer.headers(), SystemTime::now(), self.max_pause);
                    let refused = retryable_status(answer.status());
                    let pause = sent.answered(refused, Some(&learned));
                    if let Some(actual) = self.reported.as_ref().and_then(|f| f(answer.headers())) {
                        self.shaper.settle(&key, cost, actual);
                    }
                    (refused, pause)
                }
                Err(e) => {
                    sent.answered(false, None);
                    (self.retry.connection_errors && connection_error(e), None)
                }
            };
            if !again || !retriable || attempt >= self.retry.max_attempts {
                return result.map_err(ClientError::Upstream);
            }
            let delay = told.unwrap_or_else(|| {
                let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
                self.retry.backoff(attempt, |upper| rng.u64(..=upper))
            });
            let retry_at = clock.now().saturating_add(shape::nanos(delay));
            if retry_at > stop_retrying || retry_at > give_up || !self.budget.withdraw() {
                return result.map_err(ClientError::Upstream);
            }
            clock.sleep(delay).await;
            // A retry the shaper cannot fit before the deadline is not
            // made: the caller gets the answer it already has.
            sent = match self.shaper.admit(&key, cost, within(clock.now())).await {
                Ok(sent) => sent,
                Err(_) => return result.map_err(ClientError::Upstream),
            };
            attempt += 1;
        }
    }
}

#[cfg(test)]
mod tests;
