//! Many clients sending at once at one key, counted: how the atomicity
//! tests and the naive-versus-atomic examples show a race.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tollgate::{Algorithm, Backend, BackendError, BackendExt, Limit, Policy, Quota};

/// A boxed answer of one check.
pub type Checked = Pin<Box<dyn Future<Output = Result<bool, BackendError>> + Send>>;

/// `limit` an hour with a burst of `limit`: nothing refills or rolls over
/// during a race of a few seconds (unless the hour turns, which a fixed
/// window shows as more than `limit`), so admitting more or fewer than
/// `limit` can only be a race. The leaky queue serves one at once and
/// holds `burst` more, so its burst is one less.
pub fn hourly(algorithm: Algorithm, limit: u64) -> Policy {
    let hour = 3_600_000_000_000;
    let burst = if algorithm == Algorithm::LeakyQueue {
        limit - 1
    } else {
        limit
    };
    let quota = Quota::with_parts(limit, hour, burst).expect("an hourly quota is valid");
    Policy::new(Limit::new(algorithm, quota))
}

/// Runs every client on its own task, each calling its `check` `requests`
/// times in a row, all at once; returns how many calls were admitted, or
/// the first error. Each client's `check` owns what it needs (a cloned
/// connection, the key), so the tasks share nothing but the store.
pub async fn admitted<F, Fut, E>(clients: Vec<F>, requests: usize) -> Result<u64, E>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Result<bool, E>> + Send,
    E: Send + 'static,
{
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|mut check| {
            tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..requests {
                    admitted += u64::from(check().await?);
                }
                Ok::<_, E>(admitted)
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("a client's task panicked")?;
    }
    Ok(total)
}

/// A client's `check` for [`admitted`]: one unit charged to `key` under
/// `policy` through `backend`, answering whether it was admitted.
pub fn charge_one<B: Backend + 'static>(
    backend: B,
    key: &str,
    policy: &Policy,
) -> Result<impl FnMut() -> Checked + Send + 'static, BackendError> {
    let policy = backend.prepare(policy)?;
    let shared = Arc::new((backend, key.to_string(), policy));
    Ok(move || -> Checked {
        let shared = Arc::clone(&shared);
        Box::pin(async move {
            let (backend, key, policy) = &*shared;
            backend.check(key, policy, 1).await.map(|d| d.allowed)
        })
    })
}

/// What the examples print: the quota, the offered load, and what each
/// limiter let through.
pub fn report(limit: u64, clients: usize, requests: usize, naive: u64, atomic: u64) -> String {
    let total = clients * requests;
    format!(
        "limit {limit} per hour, {clients} concurrent clients x {requests} requests = {total}\n\
         naive read-then-write fixed window: {naive} let through\n\
         tollgate atomic fixed window:       {atomic} let through"
    )
}
