//! [`RateLimitService`]: the layer around one inner service.
//!
//! # Queueing
//!
//! A `leaky_queue` rule admits a request with a `delay`: the time until the
//! queue releases it. The service then waits on a tokio timer (no thread is
//! blocked) before calling the inner service, as nginx `limit_req` does
//! without `nodelay`. The client sees a slower response, never a refusal,
//! while the queue has room.
//!
//! A client that disconnects while waiting: when the server drops the
//! request's future (hyper does when it sees the connection closed; the
//! client gets no response at all), the layer refunds every charge the
//! request made, on a task of its own. For the queue that gives the slot back
//! by the store's `refund`: the drain's next free time moves back by the
//! request's cost, capped at now, so the next arrival takes the freed place;
//! requests already queued behind keep the release times they were given.
//! If the store fails the refund, the slot stays spent.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use tollgate::Backend;
use tower_service::Service;

use crate::admit::{Entry, Verdict};
use crate::layer::Gate;
use crate::observe::latency;
use crate::{LimitBody, RequestView};

/// A service behind a [`RateLimit`](crate::RateLimit) layer.
pub struct RateLimitService<S, B: Backend> {
    inner: S,
    gate: Arc<Gate<B>>,
}

impl<S: Clone, B: Backend> Clone for RateLimitService<S, B> {
    fn clone(&self) -> Self {
        RateLimitService {
            inner: self.inner.clone(),
            gate: Arc::clone(&self.gate),
        }
    }
}

impl<S, B: Backend> RateLimitService<S, B> {
    pub(crate) fn new(inner: S, gate: Arc<Gate<B>>) -> Self {
        RateLimitService { inner, gate }
    }
}

/// The boxed future of a [`RateLimitService`].
pub type ResponseFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<S, B>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    B: Backend + 'static,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<LimitBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let started = quanta::Instant::now();
        let (parts, body) = request.into_parts();
        let plan = self.gate.plan(&RequestView::of(&parts));
        let request = Request::from_parts(parts, body);
        // The clone that was polled ready is the one called.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let gate = Arc::clone(&self.gate);
        Box::pin(async move {
            let plan = match plan {
                Ok(plan) if plan.is_empty() => {
                    return inner.call(request).await.map(|r| r.map(LimitBody::inner));
                }
                Ok(plan) => plan,
                Err(refusal) => {
                    latency(started);
                    return Ok(gate.refused(&refusal, &[]));
                }
            };
            let verdict = gate.admit(plan).await;
            latency(started);
            let mut entries = match verdict {
                Verdict::Refuse { refusal, entries } => return Ok(gate.refused(&refusal, &entries)),
                Verdict::Admit { entries, delay: 0 } => entries,
                Verdict::Admit { entries, delay } => {
                    let queued = Queued {
                        gate: Arc::clone(&gate),
                        entries: Some(entries),
                    };
                    tokio::time::sleep(Duration::from_nanos(delay)).await;
                    queued.release()
                }
            };
            let mut response = inner.call(request).await?;
            gate.reconcile(&mut entries, &mut response).await;
            gate.decorate(response.headers_mut(), &entries);
            Ok(response.map(LimitBody::inner))
        })
    }
}

/// The charges of a request waiting in a queue: given back if the wait is
/// abandoned (the future dropped) rather than [`released`](Queued::release).
struct Queued<B: Backend + 'static> {
    gate: Arc<Gate<B>>,
    entries: Option<Vec<Entry>>,
}

impl<B: Backend + 'static> Queued<B> {
    fn release(mut self) -> Vec<Entry> {
        self.entries.take().unwrap_or_default()
    }
}

impl<B: Backend + 'static> Drop for Queued<B> {
    fn drop(&mut self) {
        let Some(entries) = self.entries.take() else {
            return;
        };
        // Dropped outside a runtime only at shutdown, when nothing is left
        // to give the slot to.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let gate = Arc::clone(&self.gate);
            runtime.spawn(async move { gate.abandon(entries).await });
        }
    }
}
