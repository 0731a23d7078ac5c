//! Each quota reduced to the small integer units the Lua library computes
//! in, and the range for which those computations are exact.
//!
//! Redis's Lua has only doubles, exact for integers up to 2^53. Rather than
//! the core's ticks of `1 / limit` ns (about 94 bits of absolute time), the
//! script works at the store clock's resolution, the microsecond, with every
//! value relative to the key's last charge:
//!
//! - windows (`fixed_window`, `sliding_counter`): the period is `a` units of
//!   `g = gcd(period, 1000)` ns and a microsecond is `b = 1000 / g` units, so
//!   a window position `(now_us * b) mod a` is exact below `a * b`;
//! - buckets (`token_bucket`, `gcra`, `leaky_bucket`, `leaky_queue`): the
//!   emission interval `period / limit` is `p / q` us in lowest terms, and a
//!   debt is kept in ticks of `1 / q` us, at most `burst * p`;
//! - `sliding_log`: whole microseconds, `ceil(period / 1us)` per period.
//!
//! With microsecond request times these units lose nothing: every core tick
//! count is the script's times a constant, so comparisons agree exactly and
//! durations are the core's rounded up to the microsecond.
//!
//! [`encode`] computes the largest value each algorithm can produce for a
//! quota (the bounds are derived next to each case) and refuses the quota if
//! it exceeds 2^53. Refunds only lower a key's numbers; a forced charge can
//! take them past a decision's bound, so [`Encoded::max`] caps what it may
//! leave, and the script refuses a forced charge beyond it
//! ([`tollgate::BackendError::OutOfRange`]), leaving the key unchanged. For
//! everyday quotas that cap is far away: a fixed window's count may reach
//! about 9 * 10^15, a GCRA debt at 100 per minute about 285 years of refill. What the
//! range admits, for a period that is a whole number of microseconds:
//!
//! - `fixed_window`, `sliding_log`: every period up to about 95 years;
//! - `sliding_counter`: `limit * period_us <= 2^52`, e.g. 1.25 million per
//!   hour or 52,000 per day;
//! - the buckets and the queue: `refill_us * q <= 2^52`, where `refill_us`
//!   is the time to refill the whole burst and `q` the denominator of the
//!   emission interval in microseconds: any quota whose interval is a whole
//!   number of microseconds (100/min, 1000/s, 10^6 per hour, ...) and whose
//!   burst refills within 142 years.
//!
//! Periods that are not whole microseconds work too while `period * 1000 /
//! gcd(period, 1000)^2` stays small (e.g. any period up to 2.5 hours).

use tollgate_core::{Algorithm, Limit};

/// Every integer the Lua library computes must stay at or below this.
pub const MAX_EXACT: u128 = 1 << 53;

/// Request times (in microseconds) are accepted up to this, leaving room to
/// add a period (the year 2112 on the Unix clock; any replayed trace shorter
/// than 142 years).
pub const MAX_TIME_US: u64 = 1 << 52;

/// One limit as the script's arguments: the algorithm's name and four
/// integers (see `lua/tollgate.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encoded {
    /// The algorithm's name, which is also its key suffix and Lua table key.
    pub algorithm: &'static str,
    /// `limit` for the windows, `burst` for the buckets and the queue.
    pub cap: u64,
    /// `a` for the windows, `p` for the buckets, the period in us for the log.
    pub x: u64,
    /// `b` for the windows, `q` for the buckets, unused (1) for the log.
    pub y: u64,
    /// The largest value the key's stored quantity may reach (a window's
    /// count, a debt in ticks, the log's running total) with every
    /// computation still exact: only a forced charge can pass the usual
    /// bound, and the script refuses one that would pass this.
    pub max: u64,
}

/// A quota whose computations would not be exact in the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutOfRange {
    /// The refused limit.
    pub limit: Limit,
    /// The largest intermediate value it would need.
    pub largest: u128,
}

impl std::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = &self.limit.quota;
        write!(
            f,
            "{} with limit {}, period {}ns and burst {} needs integers up to {} in the \
             Redis script, above 2^53 where Lua's doubles stop being exact; use a smaller \
             limit or burst, or a period that is a whole number of microseconds",
            self.limit.algorithm,
            q.limit(),
            q.period_ns(),
            q.burst(),
            self.largest
        )
    }
}

impl std::error::Error for OutOfRange {}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The script arguments for `limit`, or why the store cannot be exact for it.
pub fn encode(limit: &Limit) -> Result<Encoded, OutOfRange> {
    let quota = &limit.quota;
    let (period, rate) = (quota.period_ns() as u128, quota.limit() as u128);
    let burst = quota.burst() as u128;
    let algorithm = limit.algorithm;
    let (cap, x, y, largest) = match algorithm {
        Algorithm::FixedWindow | Algorithm::SlidingCounter => {
            let g = gcd(period, 1000);
            let (a, b) = (period / g, 1000 / g);
            // Crossing test: d*b + offset with d < 2a, offset < a.
            let windows = a * (2 * b + 1);
            // Sliding counter: (curr + cost) * a with curr, cost <= limit.
            let counter = if algorithm == Algorithm::SlidingCounter {
                2 * rate * a
            } else {
                0
            };
            (rate, a, b, windows.max(counter))
        }
        Algorithm::SlidingLog => {
            let span = period.div_ceil(1000);
            // Times up to MAX_TIME_US plus one period; totals are bounded
            // by the key's lifetime charges (documented in the crate docs).
            (rate, span, 1, MAX_TIME_US as u128 + span)
        }
        Algorithm::TokenBucket
        | Algorithm::Gcra
        | Algorithm::LeakyBucket
        | Algorithm::LeakyQueue => {
            let g = gcd(period, 1000 * rate);
            let (p, q) = (period / g, 1000 * rate / g);
            // Debt + cost*p with cost <= burst (+1 for the queue's wait plus
            // cost - 1 <= burst); draining keeps elapsed*q below debt + q.
            let debts = (2 * burst + 2) * p;
            (burst, p, q, debts.max((burst + 1) * p + q))
        }
    };
    if largest > MAX_EXACT {
        return Err(OutOfRange {
            limit: *limit,
            largest,
        });
    }
    // What each algorithm adds to its stored quantity within one decision
    // (a cost of at most `cap`, in the script's units), so that quantity
    // may reach MAX_EXACT less that: the bound checked above keeps it at
    // or above every value a decision alone can leave.
    let max = match algorithm {
        Algorithm::FixedWindow => MAX_EXACT - rate,
        Algorithm::SlidingCounter => MAX_EXACT / x - rate,
        Algorithm::SlidingLog => MAX_EXACT,
        Algorithm::LeakyQueue => MAX_EXACT - (burst + 1) * x,
        Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket => MAX_EXACT - burst * x,
    };
    Ok(Encoded {
        algorithm: algorithm.name(),
        cap: cap as u64,
        x: x as u64,
        y: y as u64,
        max: max as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::Quota;

    fn limit(algorithm: Algorithm, limit: u64, period: u64, burst: u64) -> Limit {
        Limit::new(algorithm, Quota::with_parts(limit, period, burst).unwrap())
    }

    #[test]
    fn units_are_in_lowest_terms() {
        // 100 per minute: T = 600 ms = 600,000 us exactly.
        let e = encode(&limit(Algorithm::Gcra, 100, 60_000_000_000, 100)).unwrap();
        assert_eq!((e.cap, e.x, e.y), (100, 600_000, 1));
        // 3 per 10 us: T = 10/3 us.
        let e = encode(&limit(Algorithm::LeakyQueue, 3, 10_000, 5)).unwrap();
        assert_eq!((e.cap, e.x, e.y), (5, 10, 3));
        // A 1 s window is 1,000,000 units of 1 us.
        let e = encode(&limit(Algorithm::FixedWindow, 7, 1_000_000_000, 7)).unwrap();
        assert_eq!((e.x, e.y), (1_000_000, 1));
        // A 999,999,937 ns window (odd): units of 1 ns, 1000 per us.
        let e = encode(&limit(Algorithm::SlidingCounter, 7, 999_999_937, 7)).unwrap();
        assert_eq!((e.x, e.y), (999_999_937, 1000));
        let e = encode(&limit(Algorithm::SlidingLog, 7, 1_500, 7)).unwrap();
        assert_eq!((e.x, e.y), (2, 1));
    }

    #[test]
    fn common_quotas_are_in_range() {
        let day = 86_400_000_000_000;
        for algorithm in Algorithm::ALL {
            for (l, period) in [
                (1, 1_000),
                (100, 60_000_000_000),
                (1_000_000, 3_600_000_000_000),
            ] {
                assert!(
                    encode(&limit(algorithm, l, period, l)).is_ok(),
                    "{algorithm} {l}"
                );
            }
            assert!(encode(&limit(algorithm, 50_000, day, 50_000)).is_ok());
        }
        // The bucket range the README states.
        let (second, hour) = (1_000_000_000, 3_600_000_000_000);
        for algorithm in [
            Algorithm::TokenBucket,
            Algorithm::Gcra,
            Algorithm::LeakyQueue,
        ] {
            assert!(encode(&limit(algorithm, 3, second, 3)).is_ok());
            assert!(encode(&limit(algorithm, 7, hour - 1_000_000, 1_000_000)).is_ok());
            assert!(encode(&limit(algorithm, 7, day - 1_000_000, 10_000)).is_ok());
        }
    }

    #[test]
    fn out_of_range_quotas_are_refused_with_the_reason() {
        // A prime period of about a day in ns: windows need a*b ~ 8.6e16.
        let l = limit(Algorithm::FixedWindow, 10, 86_399_999_999_971, 10);
        let err = encode(&l).unwrap_err();
        assert!(err.largest > MAX_EXACT);
        assert!(err.to_string().contains("2^53"), "{err}");
        // A big burst at an interval that is no whole number of us: p is the
        // whole period (1 day + 1 ns) and q = 3000.
        let l = limit(Algorithm::TokenBucket, 3, 86_400_000_000_001, 10_000);
        assert!(encode(&l).is_err());
    }
}
