//! A request body under the listener's bounds: its size, the pace it
//! arrives at, and its framing. The service behind reads it as any body;
//! when a bound is crossed the read fails, and the fault is left where the
//! listener finds it once the service has answered, so the client gets the
//! 4xx that is its due (413, 408, 400) whatever the service made of the
//! failed read (axum's 400, the proxy's 502).
//!
//! The pace is Apache's `mod_reqtimeout` rule: a body has `timeout` to
//! arrive, plus one second for every `min_rate` bytes received, so a large
//! upload at a decent rate is never cut while a client sending a byte every
//! few seconds is. Only time spent waiting for the client counts: a service
//! that reads the body late (a proxy waiting on its upstream) does not
//! spend the client's time.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

/// Why a request body was not read to its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Fault {
    /// More than the body bound.
    #[error("the request body is over the size bound")]
    TooLarge,
    /// Not arrived at the minimum pace.
    #[error("the request body came too slowly")]
    TooSlow,
    /// Broken framing (a bad chunk size, a connection closed midway).
    #[error("the request body is malformed or incomplete")]
    Malformed,
}

impl Fault {
    /// The answer the client gets.
    pub(crate) fn status(self) -> StatusCode {
        match self {
            Fault::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Fault::TooSlow => StatusCode::REQUEST_TIMEOUT,
            Fault::Malformed => StatusCode::BAD_REQUEST,
        }
    }

    /// The fault behind `error`, if a request body is what failed.
    pub(crate) fn behind(error: &(dyn std::error::Error + 'static)) -> Option<Fault> {
        let mut cause = Some(error);
        while let Some(e) = cause {
            if let Some(fault) = e.downcast_ref::<Fault>() {
                return Some(*fault);
            }
            cause = e.source();
        }
        None
    }

    /// Its `reason` in `tollgate_server_refused_total`.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Fault::TooLarge => "body_too_large",
            Fault::TooSlow => "body_timeout",
            Fault::Malformed => "body_malformed",
        }
    }
}

/// Where a body leaves its fault for the listener.
pub(crate) type FaultSlot = Arc<OnceLock<Fault>>;

/// How fast a body must come: `timeout`, plus a second per `min_rate`
/// bytes received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    /// Time a body may take before any allowance for its size.
    pub timeout: Duration,
    /// Bytes per second that earn a second more; 0 earns nothing (a plain
    /// deadline).
    pub min_rate: u64,
}

impl Pace {
    /// The time a body that brought `received` bytes so far may have taken.
    fn allowance(&self, received: u64) -> Duration {
        match received.checked_div(self.min_rate) {
            Some(secs) => self.timeout.saturating_add(Duration::from_secs(secs)),
            None => self.timeout,
        }
    }
}

/// A request body under the listener's bounds.
pub(crate) struct Guarded {
    inner: Incoming,
    max: Option<u64>,
    pace: Pace,
    received: u64,
    /// Time spent waiting for the client so far.
    waited: Duration,
    /// Since when the body has been waiting for the client, if it is.
    waiting_since: Option<Instant>,
    timer: Option<Pin<Box<Sleep>>>,
    fault: FaultSlot,
}

impl Guarded {
    /// `inner` bounded to `max` bytes at `pace`; a fault goes to `fault`.
    pub(crate) fn new(inner: Incoming, max: Option<u64>, pace: Pace, fault: FaultSlot) -> Self {
        Guarded {
            inner,
            max,
            pace,
            received: 0,
            waited: Duration::ZERO,
            waiting_since: None,
            timer: None,
            fault,
        }
    }

    fn fail(&mut self, fault: Fault) -> Poll<Option<Result<Frame<Bytes>, Fault>>> {
        // The first fault is the cause; what follows is its consequence.
        let first = *self.fault.get_or_init(|| fault);
        Poll::Ready(Some(Err(first)))
    }

    /// Arms the timer for the time left to wait; whether it ran out.
    fn out_of_time(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let allowance = self.pace.allowance(self.received);
        let Some(left) = allowance.checked_sub(self.waited).filter(|l| !l.is_zero()) else {
            return true;
        };
        let deadline = now + left;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.deadline() != deadline {
            timer.as_mut().reset(deadline);
        }
        timer.as_mut().poll(cx).is_ready()
    }
}

impl Body for Guarded {
    type Data = Bytes;
    type Error = Fault;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Fault>>> {
        let this = self.get_mut();
        if let Some(fault) = this.fault.get() {
            return Poll::Ready(Some(Err(*fault)));
        }
        if let Some(since) = this.waiting_since.take() {
            this.waited += since.elapsed();
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.received = this.received.saturating_add(data.len() as u64);
                    if this.max.is_some_and(|max| this.received > max) {
                        return this.fail(Fault::TooLarge);
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                tracing::debug!(error = %e, "request body unreadable");
                this.fail(Fault::Malformed)
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let now = Instant::now();
                if this.out_of_time(cx, now) {
                    return this.fail(Fault::TooSlow);
                }
                this.waiting_since = Some(now);
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allowance_grows_with_what_came() {
        let pace = Pace {
            timeout: Duration::from_secs(20),
            min_rate: 500,
        };
        assert_eq!(pace.allowance(0), Duration::from_secs(20));
        assert_eq!(pace.allowance(499), Duration::from_secs(20));
        assert_eq!(pace.allowance(5_000), Duration::from_secs(30));
        let deadline = Pace {
            min_rate: 0,
            ..pace
        };
        assert_eq!(deadline.allowance(1 << 40), Duration::from_secs(20));
    }
}
