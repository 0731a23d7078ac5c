use crate::algorithms::{
    AlgorithmState, FixedWindow, Gcra, LeakyBucket, LeakyQueue, SlidingCounter, SlidingLog,
    TokenBucket,
};
use crate::{Algorithm, Decision, Lease, LeaseError, Quota};

/// The per-key state of any algorithm, chosen at run time.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// See [`FixedWindow`].
    FixedWindow(FixedWindow),
    /// See [`SlidingLog`].
    SlidingLog(SlidingLog),
    /// See [`SlidingCounter`].
    SlidingCounter(SlidingCounter),
    /// See [`TokenBucket`].
    TokenBucket(TokenBucket),
    /// See [`Gcra`].
    Gcra(Gcra),
    /// See [`LeakyBucket`].
    LeakyBucket(LeakyBucket),
    /// See [`LeakyQueue`].
    LeakyQueue(LeakyQueue),
}

/// Runs `$body` with `$s` bound to the inner state of `$state`.
macro_rules! dispatch {
    ($state:expr, $s:ident => $body:expr) => {
        match $state {
            State::FixedWindow($s) => $body,
            State::SlidingLog($s) => $body,
            State::SlidingCounter($s) => $body,
            State::TokenBucket($s) => $body,
            State::Gcra($s) => $body,
            State::LeakyBucket($s) => $body,
            State::LeakyQueue($s) => $body,
        }
    };
}

impl State {
    /// A fresh key for `algorithm` under `quota`.
    pub fn new(algorithm: Algorithm, quota: &Quota) -> Self {
        match algorithm {
            Algorithm::FixedWindow => State::FixedWindow(AlgorithmState::new(quota)),
            Algorithm::SlidingLog => State::SlidingLog(AlgorithmState::new(quota)),
            Algorithm::SlidingCounter => State::SlidingCounter(AlgorithmState::new(quota)),
            Algorithm::TokenBucket => State::TokenBucket(AlgorithmState::new(quota)),
            Algorithm::Gcra => State::Gcra(AlgorithmState::new(quota)),
            Algorithm::LeakyBucket => State::LeakyBucket(AlgorithmState::new(quota)),
            Algorithm::LeakyQueue => State::LeakyQueue(AlgorithmState::new(quota)),
        }
    }

    /// Which algorithm this state belongs to.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            State::FixedWindow(_) => Algorithm::FixedWindow,
            State::SlidingLog(_) => Algorithm::SlidingLog,
            State::SlidingCounter(_) => Algorithm::SlidingCounter,
            State::TokenBucket(_) => Algorithm::TokenBucket,
            State::Gcra(_) => Algorithm::Gcra,
            State::LeakyBucket(_) => Algorithm::LeakyBucket,
            State::LeakyQueue(_) => Algorithm::LeakyQueue,
        }
    }

    /// Decides on a request of `cost` at `now` (ns) and charges it if admitted.
    #[inline]
    pub fn decide(&mut self, quota: &Quota, now: u64, cost: u64) -> Decision {
        dispatch!(self, s => s.decide(quota, now, cost))
    }

    /// The decision `decide` would make, without applying it.
    #[inline]
    pub fn preview(&self, quota: &Quota, now: u64, cost: u64) -> Decision {
        dispatch!(self, s => s.preview(quota, now, cost))
    }

    /// Whether the key, left alone until `now`, is back to its initial state.
    pub fn is_idle(&self, quota: &Quota, now: u64) -> bool {
        dispatch!(self, s => s.is_idle(quota, now))
    }

    /// Gives back `cost` at `now`, capped at a fresh key (see [`AlgorithmState::refund`]).
    pub fn refund(&mut self, quota: &Quota, now: u64, cost: u64) {
        dispatch!(self, s => s.refund(quota, now, cost))
    }

    /// Charges `cost` at `now` whatever the state: never denies, may leave
    /// the key in debt (see [`AlgorithmState::force`]). Returns the key's
    /// numbers after the charge, `allowed` true.
    pub fn force(&mut self, quota: &Quota, now: u64, cost: u64) -> Decision {
        dispatch!(self, s => s.force(quota, now, cost))
    }

    /// Admits and charges the largest `k <= max` admitted at `now` (see
    /// [`AlgorithmState::lease`]); the sliding log refuses.
    pub fn lease(&mut self, quota: &Quota, now: u64, max: u64) -> Result<Lease, LeaseError> {
        dispatch!(self, s => s.lease(quota, now, max))
    }

    /// The key's own clock (see [`AlgorithmState::last_update`]).
    pub fn last_update(&self) -> u64 {
        dispatch!(self, s => s.last_update())
    }

    /// Bytes the algorithm's own state occupies, inline and on the heap (a
    /// store that knows the algorithm keeps that, not the whole enum).
    pub fn memory_bytes(&self) -> usize {
        let heap = match self {
            State::SlidingLog(log) => log.heap_bytes(),
            _ => 0,
        };
        dispatch!(self, s => std::mem::size_of_val(s)) + heap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_the_algorithms_own_state() {
        let quota = Quota::per_minute(100).unwrap();
        let bytes = |a| State::new(a, &quota).memory_bytes();
        // An exact TAT (two words) and the last charge's time.
        assert_eq!(bytes(Algorithm::Gcra), 24);
        assert_eq!(bytes(Algorithm::FixedWindow), 16);
        assert_eq!(bytes(Algorithm::SlidingCounter), 24);
        let mut log = State::new(Algorithm::SlidingLog, &quota);
        let empty = log.memory_bytes();
        for t in 0..10 {
            log.decide(&quota, t, 1);
        }
        assert!(log.memory_bytes() >= empty + 10 * 16);
    }
}
