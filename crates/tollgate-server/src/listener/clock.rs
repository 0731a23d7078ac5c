//! The two clocks of one HTTP/1.1 connection: the time a client has to
//! finish a request's headers once it started sending them, and the time a
//! keep-alive connection may wait idle for its next request.
//!
//! hyper has a single bound, `header_read_timeout`, started as soon as it
//! waits for a request head, so it would also be the idle bound. Proxies keep
//! the two apart (nginx: `client_header_timeout` 60 s, `keepalive_timeout`
//! 75 s; HAProxy: `timeout http-request` and `timeout http-keep-alive`): a
//! slowloris must be cut after seconds, while a client between two requests
//! is worth keeping longer, since reusing its connection saves a handshake.
//! This clock is driven by the listener (bytes read, request started,
//! response finished) and asked, by one timer per connection, which bound
//! expired.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// The bound a connection went past.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expired {
    /// Request bytes came, but not a whole head in time: 408.
    Header,
    /// No request came in time after the last response: close quietly.
    Idle,
}

/// The state of one connection's clocks.
pub(crate) struct Clock {
    header: Duration,
    idle: Duration,
    state: Mutex<State>,
}

struct State {
    /// Requests whose response has not been fully written yet: no bound
    /// runs then (the body limits and the upstream timeout apply).
    busy: usize,
    /// When the connection last became idle: accepted, or its last
    /// response finished.
    idle_since: Instant,
    /// When the first byte of the next request's head arrived, if it did.
    head_since: Option<Instant>,
}

impl Clock {
    /// The clocks of a connection accepted at `now`.
    pub(crate) fn new(now: Instant, header: Duration, idle: Duration) -> Self {
        Clock {
            header,
            idle,
            state: Mutex::new(State {
                busy: 0,
                idle_since: now,
                head_since: None,
            }),
        }
    }

    /// Request bytes arrived: between requests, they start the header
    /// clock. `now` is only called then, not on every read.
    pub(crate) fn read(&self, now: impl FnOnce() -> Instant) {
        let mut state = self.state.lock();
        if state.busy == 0 && state.head_since.is_none() {
            state.head_since = Some(now());
        }
    }

    /// A request's head is complete and its handling starts.
    pub(crate) fn request_started(&self) {
        let mut state = self.state.lock();
        state.busy += 1;
        state.head_since = None;
    }

    /// A response was written to its end (or abandoned).
    pub(crate) fn request_finished(&self, now: Instant) {
        let mut state = self.state.lock();
        state.busy = state.busy.saturating_sub(1);
        if state.busy == 0 {
            state.idle_since = now;
            state.head_since = None;
        }
    }

    /// The bound expired at `now`, or the deadline of the bound that runs.
    pub(crate) fn check(&self, now: Instant) -> Result<Instant, Expired> {
        let state = self.state.lock();
        let (deadline, expired) = if state.busy > 0 {
            // Nothing to bound while a request is handled; look again later.
            return Ok(now + self.header.min(self.idle));
        } else if let Some(since) = state.head_since {
            (since + self.header, Expired::Header)
        } else {
            (state.idle_since + self.idle, Expired::Idle)
        };
        if now >= deadline {
            Err(expired)
        } else {
            Ok(deadline)
        }
    }

    /// Resolves with the bound that expired; never, while requests keep
    /// coming in time.
    pub(crate) async fn expired(&self) -> Expired {
        // Activity can bring a deadline closer (a head's first byte on an
        // idle connection: its header bound ends before the idle one), but
        // never to less than the shorter bound after the activity: waking
        // at least that often never misses one.
        let step = self.header.min(self.idle);
        loop {
            let now = Instant::now();
            match self.check(now) {
                Ok(next) => tokio::time::sleep_until(next.min(now + step)).await,
                Err(expired) => return expired,
            }
        }
    }
}

/// Marks its request finished when dropped: hyper drops a response body
/// once it is written to its end, and the service's future (holding this
/// until then) if the connection goes away first.
pub(crate) struct Finished(pub(crate) Arc<Clock>);

impl Drop for Finished {
    fn drop(&mut self) {
        self.0.request_finished(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: Duration = Duration::from_secs(10);
    const IDLE: Duration = Duration::from_secs(60);

    fn at(start: Instant, secs: u64) -> Instant {
        start + Duration::from_secs(secs)
    }

    #[test]
    fn an_idle_connection_gets_the_idle_bound_not_the_header_one() {
        let t0 = Instant::now();
        let clock = Clock::new(t0, HEADER, IDLE);
        assert_eq!(clock.check(at(t0, 30)), Ok(at(t0, 60)));
        assert_eq!(clock.check(at(t0, 60)), Err(Expired::Idle));
    }

    #[test]
    fn the_first_byte_starts_the_header_bound() {
        let t0 = Instant::now();
        let clock = Clock::new(t0, HEADER, IDLE);
        clock.read(|| at(t0, 55));
        // A later byte does not restart it: a slowloris trickling bytes.
        clock.read(|| at(t0, 64));
        assert_eq!(clock.check(at(t0, 60)), Ok(at(t0, 65)));
        assert_eq!(clock.check(at(t0, 65)), Err(Expired::Header));
    }

    #[test]
    fn no_bound_runs_while_a_request_is_handled() {
        let t0 = Instant::now();
        let clock = Clock::new(t0, HEADER, IDLE);
        clock.read(|| at(t0, 1));
        clock.request_started();
        // Body bytes of the request in flight start nothing.
        clock.read(|| at(t0, 2));
        assert_eq!(clock.check(at(t0, 500)), Ok(at(t0, 510)));
        clock.request_finished(at(t0, 600));
        assert_eq!(clock.check(at(t0, 601)), Ok(at(t0, 660)));
        assert_eq!(clock.check(at(t0, 660)), Err(Expired::Idle));
    }

    #[test]
    fn the_idle_bound_restarts_after_each_response() {
        let t0 = Instant::now();
        let clock = Clock::new(t0, HEADER, IDLE);
        for (i, start) in [50u64, 100, 150].into_iter().enumerate() {
            clock.read(|| at(t0, start));
            clock.request_started();
            clock.request_finished(at(t0, start + 1));
            assert_eq!(
                clock.check(at(t0, start + 2)),
                Ok(at(t0, start + 61)),
                "{i}"
            );
        }
    }

    #[test]
    fn pipelined_requests_keep_the_connection_busy_until_the_last_ends() {
        let t0 = Instant::now();
        let clock = Clock::new(t0, HEADER, IDLE);
        clock.request_started();
        clock.request_started();
        clock.request_finished(at(t0, 1));
        assert_eq!(clock.check(at(t0, 100)), Ok(at(t0, 110)));
        clock.request_finished(at(t0, 101));
        assert_eq!(clock.check(at(t0, 161)), Err(Expired::Idle));
    }

    #[tokio::test(start_paused = true)]
    async fn the_timer_resolves_with_the_bound_that_expired() {
        let clock = Clock::new(Instant::now(), HEADER, IDLE);
        let started = Instant::now();
        assert_eq!(clock.expired().await, Expired::Idle);
        assert_eq!(started.elapsed(), IDLE);
        let clock = Clock::new(Instant::now(), HEADER, IDLE);
        clock.read(Instant::now);
        let started = Instant::now();
        assert_eq!(clock.expired().await, Expired::Header);
        assert_eq!(started.elapsed(), HEADER);
    }

    /// The timer waits for the idle bound when a head starts: the header
    /// bound, shorter, must still end on time.
    #[tokio::test(start_paused = true)]
    async fn a_closer_deadline_set_while_the_timer_waits_is_kept() {
        let clock = Arc::new(Clock::new(Instant::now(), HEADER, IDLE));
        let started = Instant::now();
        let timer = tokio::spawn({
            let clock = Arc::clone(&clock);
            async move { clock.expired().await }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        clock.read(Instant::now);
        assert_eq!(timer.await.unwrap(), Expired::Header);
        assert_eq!(started.elapsed(), Duration::from_secs(5) + HEADER);
        // And an idle bound shorter than the header one, after a request
        // that started while the header bound ran.
        let clock = Arc::new(Clock::new(Instant::now(), IDLE, HEADER));
        clock.read(Instant::now);
        let started = Instant::now();
        let timer = tokio::spawn({
            let clock = Arc::clone(&clock);
            async move { clock.expired().await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        clock.request_started();
        clock.request_finished(Instant::now());
        assert_eq!(timer.await.unwrap(), Expired::Idle);
        assert_eq!(started.elapsed(), Duration::from_secs(1) + HEADER);
    }
}
