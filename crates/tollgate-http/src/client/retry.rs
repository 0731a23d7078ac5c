//! When a request is retried, after how long, and how many retries a
//! client may make at all ([`RetryBudget`]).

use std::time::Duration;

use http::{HeaderMap, Method, StatusCode};
use tollgate::{Algorithm, Clock, Limit, Limiter, Quota, QuotaError};

use super::shape::nanos;

/// The `Idempotency-Key` request header.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// Budget units one retry costs; a request deposits its percentage of it.
const RETRY_UNITS: u64 = 100;

/// How requests are retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    /// Attempts in all, the first included (1: never retry).
    pub max_attempts: u32,
    /// No retry starts later than this after the first attempt.
    pub max_total: Duration,
    /// The first backoff's upper bound; doubles with each retry.
    pub base: Duration,
    /// The largest backoff bound.
    pub cap: Duration,
    /// Whether connection errors are retried too (429 and 503 always are).
    pub connection_errors: bool,
}

impl Default for Retry {
    /// 4 attempts within 30 s, backoff from 100 ms up to 10 s, no retry on
    /// connection errors.
    fn default() -> Self {
        Retry {
            max_attempts: 4,
            max_total: Duration::from_secs(30),
            base: Duration::from_millis(100),
            cap: Duration::from_secs(10),
            connection_errors: false,
        }
    }
}

impl Retry {
    /// The backoff before retry number `retry` (1 for the first), with full
    /// jitter: uniform in `[0, min(cap, base * 2^(retry-1))]`, drawn by
    /// `draw(upper)` which returns a value in `0..=upper`.
    pub fn backoff(&self, retry: u32, draw: impl FnOnce(u64) -> u64) -> Duration {
        let bound = nanos(self.base)
            .saturating_mul(
                1u64.checked_shl(retry.saturating_sub(1))
                    .unwrap_or(u64::MAX),
            )
            .min(nanos(self.cap));
        Duration::from_nanos(draw(bound).min(bound))
    }
}

/// Whether a failed request may be sent again: its method is idempotent
/// (RFC 9110: GET, HEAD, OPTIONS, TRACE, PUT, DELETE), or it carries an
/// `Idempotency-Key` the server can use to apply it once.
pub fn may_retry(method: &Method, headers: &HeaderMap) -> bool {
    method.is_idempotent() || headers.contains_key(IDEMPOTENCY_KEY)
}

/// Whether an answer asks for a retry: 429 or 503.
pub fn retryable_status(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE
}

/// The share of requests a client may retry, as a token bucket: each
/// request deposits `percent`% of a retry, each retry withdraws a whole
/// one; the bucket holds at most `burst` retries (and starts full) and also
/// refills by `per_second` retries a second, so a quiet client can still
/// retry now and then. Under a server that refuses everything, retries stay
/// within `burst + per_second * seconds + percent% of requests`: a fleet
/// cannot turn an outage into a retry storm.
pub struct RetryBudget<C: Clock> {
    bucket: Limiter<(), C>,
    deposit: u64,
}

/// The shape of a [`RetryBudget`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Retries allowed per 100 requests.
    pub percent: u64,
    /// Retries the bucket holds.
    pub burst: u64,
    /// Retries it regains each second on its own (at least 1).
    pub per_second: u64,
}

impl Default for Budget {
    /// 10% of requests, 10 at once, 1 a second.
    fn default() -> Self {
        Budget {
            percent: 10,
            burst: 10,
            per_second: 1,
        }
    }
}

impl<C: Clock> RetryBudget<C> {
    /// A full budget of shape `budget` on `clock`.
    pub fn new(budget: Budget, clock: C) -> Result<Self, QuotaError> {
        let quota = Quota::with_parts(
            budget.per_second.max(1).saturating_mul(RETRY_UNITS),
            1_000_000_000,
            budget.burst.max(1).saturating_mul(RETRY_UNITS),
        )?;
        Ok(RetryBudget {
            bucket: Limiter::builder(Limit::new(Algorithm::TokenBucket, quota))
                .clock(clock)
                .build(),
            deposit: budget.percent.min(RETRY_UNITS),
        })
    }

    /// Counts one request (not a retry): its share goes into the bucket.
    pub fn deposit(&self) {
        self.bucket.refund(&(), self.deposit);
    }

    /// Takes one retry from the budget; `false` if it is spent.
    pub fn withdraw(&self) -> bool {
        self.bucket.check_cost(&(), RETRY_UNITS).allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::FakeClock;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_full_jitter() {
        let r = Retry::default();
        let top = |n| r.backoff(n, |upper| upper);
        assert_eq!(top(1), Duration::from_millis(100));
        assert_eq!(top(2), Duration::from_millis(200));
        assert_eq!(top(7), Duration::from_millis(6400));
        assert_eq!(top(8), Duration::from_secs(10));
        assert_eq!(top(200), Duration::from_secs(10));
        assert_eq!(r.backoff(3, |_| 0), Duration::ZERO);
        // A draw beyond the bound is held to it.
        assert_eq!(r.backoff(1, |_| u64::MAX), Duration::from_millis(100));
    }

    #[test]
    fn only_idempotent_or_keyed_requests_are_retried() {
        let mut headers = HeaderMap::new();
        assert!(may_retry(&Method::GET, &headers));
        assert!(may_retry(&Method::PUT, &headers));
        assert!(!may_retry(&Method::POST, &headers));
        assert!(!may_retry(&Method::PATCH, &headers));
        headers.insert(IDEMPOTENCY_KEY, "k-1".parse().unwrap());
        assert!(may_retry(&Method::POST, &headers));
        assert!(retryable_status(StatusCode::TOO_MANY_REQUESTS));
        assert!(retryable_status(StatusCode::SERVICE_UNAVAILABLE));
        assert!(!retryable_status(StatusCode::INTERNAL_SERVER_ERROR));
    }

    #[test]
    fn the_budget_is_a_share_of_requests() {
        let clock = FakeClock::new();
        let budget = Budget {
            percent: 10,
            burst: 2,
            per_second: 1,
        };
        let b = RetryBudget::new(budget, clock.clone()).unwrap();
        assert!(b.withdraw() && b.withdraw(), "starts full");
        assert!(!b.withdraw());
        for _ in 0..9 {
            b.deposit();
        }
        assert!(!b.withdraw(), "nine requests are not yet worth a retry");
        b.deposit();
        assert!(b.withdraw(), "ten requests are");
        assert!(!b.withdraw());
        clock.advance(Duration::from_secs(1));
        assert!(b.withdraw(), "one a second on its own");
        assert!(!b.withdraw());
    }
}
