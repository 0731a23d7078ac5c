//! [`Shaper`]: outbound requests wait for their key's budget, and pause
//! while a server has said the budget is spent.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tollgate::{AsyncClock, Limiter, MonotonicClock, Policy, WaitError};

use super::pace::Paces;
use crate::learn::Learned;

/// Why a request was not sent: it fails at once instead of waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// The cost is larger than the outbound limit can ever admit.
    #[error("a request of cost {cost} can never fit the outbound limit")]
    NeverFits {
        /// The request's cost.
        cost: u64,
    },
    /// The request could go only after its deadline.
    #[error("the request could go only in {wait:?}, past its deadline")]
    TooLate {
        /// How long it would have had to wait.
        wait: Duration,
    },
    /// The limiter holds its maximum of keys.
    #[error("the outbound limiter holds its maximum of keys")]
    Full,
}

/// Outbound traffic shaping: each key (an upstream host, or a key of the
/// caller's) gets a budget under a tollgate [`Policy`] (GCRA for a smooth
/// rate, the leaky queue for a steady one, ...) and pauses until the reset
/// a server announced once it says the budget is spent.
///
/// Waiting sleeps on the clock (tokio's timer by default): no polling, no
/// blocked thread.
pub struct Shaper<C: AsyncClock = MonotonicClock> {
    limiter: Limiter<String, C>,
    /// Per key: the time (ns on the clock) before which nothing is sent.
    pauses: Mutex<HashMap<String, u64>>,
    paces: Paces,
}

impl Shaper<MonotonicClock> {
    /// A shaper enforcing `policy` per key on the monotonic clock.
    pub fn new(policy: impl Into<Policy>) -> Self {
        Shaper::with_clock(policy, MonotonicClock::new())
    }
}

impl<C: AsyncClock> Shaper<C> {
    /// A shaper on `clock` (a [`FakeClock`](tollgate::FakeClock) in tests).
    pub fn with_clock(policy: impl Into<Policy>, clock: C) -> Self {
        let policy = policy.into();
        Shaper {
            paces: Paces::new(&policy),
            limiter: Limiter::builder(policy).clock(clock).build(),
            pauses: Mutex::new(HashMap::new()),
        }
    }

    /// Whether requests may leave faster than one interval apart: within
    /// the policy's own burst, and while the server's last answer reports
    /// units left (its burst). Default `false`: every key's requests leave
    /// one interval apart, the interval being the slower of the policy's
    /// and the server's announced rate.
    pub fn bursts(mut self, bursts: bool) -> Self {
        self.paces.set_bursts(bursts);
        self
    }

    /// How much slower than the rate a server announces in
    /// its answers a key is paced, in percent of the interval
    /// (default 5: 20 a second is paced at one every 52.5 ms), so network
    /// jitter does not bunch requests past the server's limit.
    pub fn headroom(mut self, percent: u64) -> Self {
        self.paces.set_headroom(percent);
        self
    }

    /// The shaper's clock.
    pub fn clock(&self) -> &C {
        self.limiter.clock()
    }

    /// Waits until `key` admits `cost`, no pause holds it and its pace
    /// gives it a slot, then charges it: the returned [`Sent`] counts it in
    /// flight until it is answered. Fails at once, charging nothing, if the
    /// cost can never fit or the wait would end more than `within` from now.
    pub async fn admit(
        &self,
        key: &str,
        cost: u64,
        within: Duration,
    ) -> Result<Sent<'_, C>, ShapeError> {
        let clock = self.clock();
        let give_up = clock.now().saturating_add(nanos(within));
        loop {
            let now = clock.now();
            if let Some(until) = self.paused_until(key, now) {
                if until > give_up {
                    return Err(ShapeError::TooLate {
                        wait: Duration::from_nanos(until - now),
                    });
                }
                clock.sleep(Duration::from_nanos(until - now)).await;
                continue;
            }
            let left = Duration::from_nanos(give_up.saturating_sub(now));
            let decision = match self.limiter.until_ready(key, cost, left).await {
                Ok(decision) => decision,
                Err(WaitError::NeverFits(_)) => return Err(ShapeError::NeverFits { cost }),
                Err(WaitError::TooLate { wait }) => {
                    return Err(ShapeError::TooLate {
                        wait: Duration::from_nanos(wait),
                    })
                }
                Err(WaitError::Full(_)) => return Err(ShapeError::Full),
            };
            if decision.delay > 0 {
                if clock.now().saturating_add(decision.delay) > give_up {
                    self.limiter.refund(key, cost);
                    return Err(ShapeError::TooLate {
                        wait: Duration::from_nanos(decision.delay),
                    });
                }
                clock.sleep(Duration::from_nanos(decision.delay)).await;
            }
            // The pace is asked again after every wait: an answer that came
            // meanwhile may have slowed it or spent the server's budget, so
            // no slot is booked ahead on what was known before.
            loop {
                let now = clock.now();
                // A pause learned while this request waited wins: the
                // charge is given back and the request waits for the pause.
                if self.paused_until(key, now).is_some() {
                    self.limiter.refund(key, cost);
                    break;
                }
                match self.paces.take(key, now) {
                    Ok(()) => {
                        return Ok(Sent {
                            shaper: self,
                            key: key.to_string(),
                            open: true,
                        })
                    }
                    Err(slot) if slot > give_up => {
                        self.limiter.refund(key, cost);
                        return Err(ShapeError::TooLate {
                            wait: Duration::from_nanos(slot - now),
                        });
                    }
                    Err(slot) => clock.sleep(Duration::from_nanos(slot - now)).await,
                }
            }
        }
    }

    /// Sends nothing for `key` during `pause` from now (a longer pause
    /// already set stays).
    pub fn pause(&self, key: &str, pause: Duration) {
        let now = self.clock().now();
        let until = now.saturating_add(nanos(pause));
        let mut pauses = self.pauses.lock().unwrap_or_else(|e| e.into_inner());
        // Expired pauses are dropped here, so the map holds only keys
        // paused now.
        pauses.retain(|_, at| *at > now);
        if until > now {
            let at = pauses.entry(key.to_string()).or_insert(until);
            *at = (*at).max(until);
        }
    }

    /// Settles a request charged `charged` whose real cost turned out to be
    /// `actual` (LLM tokens from the response): the difference is refunded
    /// or force-charged, as the server layer's reconciliation does.
    pub fn settle(&self, key: &str, charged: u64, actual: u64) {
        if actual < charged {
            self.limiter.refund(key, charged - actual);
        } else if actual > charged {
            self.limiter.force(key, actual - charged);
        }
    }

    fn paused_until(&self, key: &str, now: u64) -> Option<u64> {
        let pauses = self.pauses.lock().unwrap_or_else(|e| e.into_inner());
        pauses.get(key).copied().filter(|&at| at > now)
    }
}

/// A request [`Shaper::admit`] let go: in flight until it is answered
/// ([`Sent::answered`]) or dropped (failed, or given up).
pub struct Sent<'a, C: AsyncClock = MonotonicClock> {
    shaper: &'a Shaper<C>,
    key: String,
    open: bool,
}

impl<C: AsyncClock> Sent<'_, C> {
    /// Applies what the answer said (`None` for no answer: a transport
    /// error), once: the key learns the server's rate and what it has
    /// left, and pauses as long as the answer calls for; `refused` is a
    /// 429 or 503. Returns that pause: the longer of `Retry-After` and the
    /// reset of a spent limit, except that a wait of at most one second
    /// (the fields' resolution) from a server that announced its rate is
    /// one interval of that rate for a refusal (doubling with each refusal
    /// in a row), and none for an admission (the spent budget then holds
    /// the next requests back by the tokens in flight).
    pub fn answered(&mut self, refused: bool, learned: Option<&Learned>) -> Option<Duration> {
        if !std::mem::take(&mut self.open) {
            return None;
        }
        let shaper = self.shaper;
        let pause = shaper
            .paces
            .done(&self.key, shaper.clock().now(), refused, learned);
        if let Some(pause) = pause {
            shaper.pause(&self.key, pause);
        }
        pause
    }
}

impl<C: AsyncClock> std::fmt::Debug for Sent<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sent").field("key", &self.key).finish()
    }
}

impl<C: AsyncClock> Drop for Sent<'_, C> {
    fn drop(&mut self) {
        self.answered(false, None);
    }
}

/// `duration` in nanoseconds, saturating.
pub(crate) fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::sync::Arc;
    use tollgate::{Algorithm, Clock, FakeClock, Limit, Quota};

    /// 10 a second, bursts of 2 allowed.
    fn shaper(clock: &FakeClock) -> Arc<Shaper<FakeClock>> {
        let quota = Quota::per_second(10).unwrap().with_burst(2).unwrap();
        Arc::new(Shaper::with_clock(Limit::new(Algorithm::Gcra, quota), clock.clone()).bursts(true))
    }

    /// Runs `task` to its end, moving the clock 10 ms at a time whenever
    /// something sleeps on it.
    pub(crate) async fn drive<T>(clock: &FakeClock, task: tokio::task::JoinHandle<T>) -> T {
        while !task.is_finished() {
            tokio::task::yield_now().await;
            if clock.sleepers() > 0 {
                clock.advance(Duration::from_millis(10));
            }
        }
        task.await.unwrap()
    }

    #[tokio::test]
    async fn waits_for_the_budget_on_the_clock() {
        let clock = FakeClock::new();
        let s = shaper(&clock);
        for _ in 0..2 {
            s.admit("api", 1, Duration::ZERO).await.unwrap();
        }
        let waiting = tokio::spawn({
            let s = s.clone();
            async move { s.admit("api", 1, Duration::from_secs(1)).await.map(drop) }
        });
        drive(&clock, waiting).await.unwrap();
        // One emission interval of 10/s: the third request went at 100 ms.
        assert_eq!(clock.now(), 100_000_000);
    }

    #[tokio::test]
    async fn fails_at_once_when_it_cannot_fit_or_is_too_late() {
        let clock = FakeClock::new();
        let s = shaper(&clock);
        assert_eq!(
            s.admit("api", 3, Duration::from_secs(9)).await.map(drop),
            Err(ShapeError::NeverFits { cost: 3 })
        );
        s.admit("api", 2, Duration::ZERO).await.unwrap();
        assert_eq!(
            s.admit("api", 1, Duration::from_millis(99)).await.map(drop),
            Err(ShapeError::TooLate {
                wait: Duration::from_millis(100)
            })
        );
        assert_eq!(clock.now(), 0, "no time passed: it failed at once");
    }

    #[tokio::test]
    async fn a_learned_pause_holds_the_key_until_the_reset() {
        let clock = FakeClock::new();
        let s = shaper(&clock);
        let learned = Learned {
            remaining: Some(0),
            spent_for: Some(Duration::from_secs(30)),
            ..Learned::default()
        };
        let mut sent = s.admit("api", 1, Duration::ZERO).await.unwrap();
        assert_eq!(
            sent.answered(false, Some(&learned)),
            Some(Duration::from_secs(30))
        );
        assert!(matches!(
            s.admit("api", 1, Duration::from_secs(29)).await,
            Err(ShapeError::TooLate { .. })
        ));
        s.admit("other", 1, Duration::ZERO).await.unwrap();
        let waiting = tokio::spawn({
            let s = s.clone();
            async move { s.admit("api", 1, Duration::from_secs(60)).await.map(drop) }
        });
        drive(&clock, waiting).await.unwrap();
        assert_eq!(clock.now(), 30_000_000_000);
    }

    #[tokio::test]
    async fn a_leaky_queue_sends_at_a_steady_rate() {
        let clock = FakeClock::new();
        let quota = Quota::per_second(10).unwrap().with_burst(5).unwrap();
        let s = Arc::new(Shaper::with_clock(
            Limit::new(Algorithm::LeakyQueue, quota),
            clock.clone(),
        ));
        let mut sent_at = Vec::new();
        for _ in 0..4 {
            let task = tokio::spawn({
                let s = s.clone();
                async move { s.admit("api", 1, Duration::from_secs(1)).await.map(drop) }
            });
            drive(&clock, task).await.unwrap();
            sent_at.push(clock.now() / 1_000_000);
        }
        // Queued back to back, released one emission interval apart.
        assert_eq!(sent_at, [0, 100, 200, 300]);
    }

    #[tokio::test]
    async fn settling_refunds_or_charges_the_difference() {
        let clock = FakeClock::new();
        let s = shaper(&clock);
        s.admit("api", 2, Duration::ZERO).await.unwrap();
        s.settle("api", 2, 0);
        s.admit("api", 2, Duration::ZERO).await.unwrap();
        s.settle("api", 2, 4);
        // Two units of debt: 2 emission intervals before it fits again,
        // plus the interval of the request itself.
        assert_eq!(
            s.admit("api", 1, Duration::ZERO).await.map(drop),
            Err(ShapeError::TooLate {
                wait: Duration::from_millis(300)
            })
        );
    }
}
