use std::fmt;
use std::num::NonZeroU64;

use crate::Algorithm;

/// How much a key may spend: `limit` per `period`, and `burst` for the
/// bucket family and the queue.
///
/// Validated at construction so that every decision's exact arithmetic fits
/// comfortably in `u128` and every reported duration fits in a `u64` of
/// nanoseconds. The supported range:
///
/// - `limit`: 1 to [`Quota::MAX_LIMIT`] (10^12);
/// - `burst`: 0 to [`Quota::MAX_LIMIT`]. 0 means no queue for
///   [`Algorithm::LeakyQueue`] (one request served at a time, none waiting:
///   nginx's default); the windows ignore `burst`; a bucket of capacity 0
///   admits no request that costs anything;
/// - `period`: 1 ns to [`Quota::MAX_SPAN_NS`] (2^62 ns, about 146 years);
/// - the time to refill a whole burst, `burst * period / limit`, at most
///   [`Quota::MAX_SPAN_NS`] as well.
///
/// That covers every combination of limits and bursts up to 10^9 with periods
/// from 1 ns to 366 days, except a burst so much larger than the limit that
/// refilling it would take more than 146 years.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    // Non-zero by type, so dividing by them needs no zero check.
    limit: NonZeroU64,
    period: NonZeroU64,
    burst: u64,
}

/// Why a [`Quota`] was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaError {
    /// `limit` was 0.
    ZeroLimit,
    /// `period` was 0.
    ZeroPeriod,
    /// `limit` above [`Quota::MAX_LIMIT`].
    LimitTooLarge(u64),
    /// `burst` above [`Quota::MAX_LIMIT`].
    BurstTooLarge(u64),
    /// `period` above [`Quota::MAX_SPAN_NS`].
    PeriodTooLong(u64),
    /// `burst * period / limit` above [`Quota::MAX_SPAN_NS`].
    RefillTooLong {
        /// The burst asked for.
        burst: u64,
        /// The limit asked for.
        limit: u64,
        /// The period asked for, in nanoseconds.
        period_ns: u64,
    },
}

impl fmt::Display for QuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            QuotaError::ZeroLimit => f.write_str("limit must be at least 1"),
            QuotaError::ZeroPeriod => f.write_str("period must be at least 1ns"),
            QuotaError::LimitTooLarge(v) => {
                write!(
                    f,
                    "limit {v} is above the supported maximum {}",
                    Quota::MAX_LIMIT
                )
            }
            QuotaError::BurstTooLarge(v) => {
                write!(
                    f,
                    "burst {v} is above the supported maximum {}",
                    Quota::MAX_LIMIT
                )
            }
            QuotaError::PeriodTooLong(v) => write!(
                f,
                "period {v}ns is above the supported maximum {}ns (about 146 years)",
                Quota::MAX_SPAN_NS
            ),
            QuotaError::RefillTooLong {
                burst,
                limit,
                period_ns,
            } => write!(
                f,
                "burst {burst} at {limit} per {period_ns}ns would take more than {}ns \
                 (about 146 years) to refill",
                Quota::MAX_SPAN_NS
            ),
        }
    }
}

impl std::error::Error for QuotaError {}

const NS_PER_SEC: u64 = 1_000_000_000;

impl Quota {
    /// The largest supported `limit` and `burst`.
    pub const MAX_LIMIT: u64 = 1_000_000_000_000;
    /// The longest supported `period` and burst refill time, in nanoseconds.
    pub const MAX_SPAN_NS: u64 = 1 << 62;

    /// `limit` per `period_ns` nanoseconds, with `burst = limit`.
    pub fn new(limit: u64, period_ns: u64) -> Result<Self, QuotaError> {
        Self::with_parts(limit, period_ns, limit)
    }

    /// `limit` per second.
    pub fn per_second(limit: u64) -> Result<Self, QuotaError> {
        Self::new(limit, NS_PER_SEC)
    }

    /// `limit` per minute.
    pub fn per_minute(limit: u64) -> Result<Self, QuotaError> {
        Self::new(limit, 60 * NS_PER_SEC)
    }

    /// `limit` per hour.
    pub fn per_hour(limit: u64) -> Result<Self, QuotaError> {
        Self::new(limit, 3600 * NS_PER_SEC)
    }

    /// The same rate with another `burst`.
    pub fn with_burst(self, burst: u64) -> Result<Self, QuotaError> {
        Self::with_parts(self.limit(), self.period_ns(), burst)
    }

    /// `limit` per `period_ns` with an explicit `burst`, validated.
    pub fn with_parts(limit: u64, period_ns: u64, burst: u64) -> Result<Self, QuotaError> {
        let Some(nonzero_limit) = NonZeroU64::new(limit) else {
            return Err(QuotaError::ZeroLimit);
        };
        let Some(nonzero_period) = NonZeroU64::new(period_ns) else {
            return Err(QuotaError::ZeroPeriod);
        };
        if limit > Self::MAX_LIMIT {
            return Err(QuotaError::LimitTooLarge(limit));
        }
        if burst > Self::MAX_LIMIT {
            return Err(QuotaError::BurstTooLarge(burst));
        }
        if period_ns > Self::MAX_SPAN_NS {
            return Err(QuotaError::PeriodTooLong(period_ns));
        }
        // The refill time of a whole burst (and of the queue's burst + 1,
        // which is at most one more period) must stay a `u64` of nanoseconds.
        let refill = (burst as u128 * period_ns as u128).div_ceil(limit as u128);
        if refill > Self::MAX_SPAN_NS as u128 {
            return Err(QuotaError::RefillTooLong {
                burst,
                limit,
                period_ns,
            });
        }
        Ok(Quota {
            limit: nonzero_limit,
            period: nonzero_period,
            burst,
        })
    }

    /// Requests (cost units) per period.
    pub const fn limit(&self) -> u64 {
        self.limit.get()
    }

    /// The period in nanoseconds.
    pub const fn period_ns(&self) -> u64 {
        self.period.get()
    }

    /// Bucket capacity in cost units, or the queue's length (defaults to
    /// `limit`; may be 0).
    pub const fn burst(&self) -> u64 {
        self.burst
    }

    /// The largest `remaining` the algorithm can report: the most cost that
    /// fits at one instant on a fresh key.
    pub const fn capacity(&self, algorithm: Algorithm) -> u64 {
        match algorithm {
            Algorithm::FixedWindow | Algorithm::SlidingLog | Algorithm::SlidingCounter => {
                self.limit()
            }
            Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket => self.burst,
            // One request is served at once and `burst` more wait.
            Algorithm::LeakyQueue => self.burst + 1,
        }
    }

    /// `now` in ticks of `1 / limit` ns.
    #[inline]
    pub(crate) fn ticks(&self, now: u64) -> u128 {
        now as u128 * self.limit() as u128
    }

    /// The emission interval times `cost`, in ticks.
    #[inline]
    pub(crate) fn cost_ticks(&self, cost: u64) -> u128 {
        cost as u128 * self.period_ns() as u128
    }

    /// The period, for divisions without a zero check.
    #[inline]
    pub(crate) const fn period_nonzero(&self) -> NonZeroU64 {
        self.period
    }

    /// The limit, for divisions without a zero check.
    #[inline]
    pub(crate) const fn limit_nonzero(&self) -> NonZeroU64 {
        self.limit
    }

    /// The bucket capacity, `burst * T`, in ticks.
    #[inline]
    pub(crate) fn burst_ticks(&self) -> u128 {
        self.cost_ticks(self.burst)
    }
}

/// One rule: an algorithm with its quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Limit {
    /// Which algorithm decides.
    pub algorithm: Algorithm,
    /// The quota it enforces.
    pub quota: Quota,
}

impl Limit {
    /// Pairs an algorithm with a quota.
    pub const fn new(algorithm: Algorithm, quota: Quota) -> Self {
        Limit { algorithm, quota }
    }

    /// The largest `remaining` this rule can report.
    pub const fn capacity(&self) -> u64 {
        self.quota.capacity(self.algorithm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_values_are_refused() {
        assert_eq!(Quota::new(0, 1), Err(QuotaError::ZeroLimit));
        assert_eq!(Quota::new(1, 0), Err(QuotaError::ZeroPeriod));
    }

    #[test]
    fn absurd_values_are_refused() {
        let big = Quota::MAX_LIMIT + 1;
        assert_eq!(Quota::new(big, 1), Err(QuotaError::LimitTooLarge(big)));
        assert_eq!(
            Quota::with_parts(1, 1, big),
            Err(QuotaError::BurstTooLarge(big))
        );
        assert_eq!(
            Quota::new(1, u64::MAX),
            Err(QuotaError::PeriodTooLong(u64::MAX))
        );
        let year = 366 * 86_400 * NS_PER_SEC;
        assert!(matches!(
            Quota::with_parts(1, year, 1_000_000_000),
            Err(QuotaError::RefillTooLong { .. })
        ));
        for e in [
            QuotaError::ZeroLimit,
            QuotaError::ZeroPeriod,
            QuotaError::LimitTooLarge(big),
            QuotaError::BurstTooLarge(big),
            QuotaError::PeriodTooLong(u64::MAX),
            QuotaError::RefillTooLong {
                burst: 1,
                limit: 1,
                period_ns: 1,
            },
        ] {
            assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn the_documented_range_is_accepted() {
        let year = 366 * 86_400 * NS_PER_SEC;
        for limit in [1, 1_000, 1_000_000_000] {
            for period in [1, 999_999_937, year] {
                for burst in [1, limit] {
                    assert!(
                        Quota::with_parts(limit, period, burst).is_ok(),
                        "{limit} {period} {burst}"
                    );
                }
            }
        }
        assert_eq!(Quota::per_minute(100).unwrap().burst(), 100);
        assert_eq!(Quota::per_second(5).unwrap().period_ns(), NS_PER_SEC);
        assert_eq!(Quota::per_hour(5).unwrap().period_ns(), 3600 * NS_PER_SEC);
    }

    #[test]
    fn debug_shows_the_three_numbers() {
        let q = Quota::with_parts(3, 10, 7).unwrap();
        assert_eq!(format!("{q:?}"), "Quota { limit: 3, period: 10, burst: 7 }");
    }

    #[test]
    fn capacity_per_algorithm() {
        let q = Quota::per_minute(100).unwrap().with_burst(20).unwrap();
        assert_eq!(q.capacity(Algorithm::FixedWindow), 100);
        assert_eq!(q.capacity(Algorithm::Gcra), 20);
        assert_eq!(q.capacity(Algorithm::LeakyQueue), 21);
    }
}
