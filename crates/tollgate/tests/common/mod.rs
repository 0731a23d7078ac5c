//! A backend whose store can be made to fail or hang, for the resilience
//! tests.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use tollgate::{Backend, BackendError, FakeClock, MemoryBackend, Operation, Outcome, Policy};

/// How the fake store answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[allow(dead_code)] // each test binary uses some of them
pub enum Health {
    Up = 0,
    Refusing = 1,
    Hanging = 2,
}

/// Process memory behind a switch: up, refusing connections, or accepting
/// and never answering. Counts the calls that reached it.
pub struct Flaky {
    pub memory: MemoryBackend<FakeClock>,
    health: AtomicU8,
    pub calls: AtomicU64,
}

#[allow(dead_code)]
impl Flaky {
    pub fn new(clock: FakeClock) -> Self {
        Flaky {
            memory: MemoryBackend::with_clock(clock),
            health: AtomicU8::new(Health::Up as u8),
            calls: AtomicU64::new(0),
        }
    }

    pub fn set(&self, health: Health) {
        self.health.store(health as u8, Ordering::SeqCst);
    }

    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Runs `op` only when up: the memory backend decides as soon as it is
    /// called, so a failing store must not even call it.
    async fn call<T, F: Future<Output = Result<T, BackendError>>>(
        &self,
        op: impl FnOnce() -> F,
    ) -> Result<T, BackendError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match self.health.load(Ordering::SeqCst) {
            0 => op().await,
            1 => Err(BackendError::Unavailable("connection refused".into())),
            _ => std::future::pending().await,
        }
    }
}

impl Backend for Flaky {
    type Prepared = <MemoryBackend<FakeClock> as Backend>::Prepared;

    fn prepare(&self, policy: &Policy) -> Result<Self::Prepared, BackendError> {
        self.memory.prepare(policy)
    }

    async fn apply(
        &self,
        key: &str,
        policy: &Self::Prepared,
        op: Operation,
    ) -> Result<Outcome, BackendError> {
        self.call(|| self.memory.apply(key, policy, op)).await
    }
}
