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
use std::task::{ready, Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use pin_project_lite::pin_project;
use tollgate::Backend;
use tower_service::Service;

use crate::admit::{Entries, Plan, Planned, Verdict};
use crate::layer::Gate;
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

impl<S, B, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<S, B>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: Backend + 'static,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<LimitBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, B, ReqBody, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let started = quanta::Instant::now();
        let plan = self
            .gate
            .plan(&RequestView::of_request(&request, self.gate.reads));
        let state = match plan {
            Ok(plan) if plan.is_empty() => State::Serving {
                future: self.inner.call(request),
                admitted: None,
            },
            Err(refusal) => {
                self.gate.latency.record(started);
                State::Answered {
                    response: Some(self.gate.refused(&refusal, &[])),
                }
            }
            Ok(plan) if self.gate.backend.decides_at_once() => {
                let verdict = decided_here(&self.gate, plan);
                self.gate.latency.record(started);
                match verdict {
                    Verdict::Admit { delay, .. } if delay > 0 => {
                        self.deciding(queue(Arc::clone(&self.gate), verdict), request)
                    }
                    verdict => next(&self.gate, &mut self.inner, verdict, request),
                }
            }
            Ok(plan) => self.deciding(decide(Arc::clone(&self.gate), plan, started), request),
        };
        ResponseFuture { state }
    }
}

impl<S: Clone, B: Backend + 'static> RateLimitService<S, B> {
    /// Waits for `decision`, then goes on as [`next`] says.
    fn deciding<ReqBody, ResBody>(
        &mut self,
        mut decision: Decision,
        request: Request<ReqBody>,
    ) -> State<S, B, ReqBody, ResBody>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    {
        // A store that answers without waiting (one in process memory,
        // behind a wrapper that cannot say so) has decided by the first
        // poll: then the inner service is called here and the request is
        // never parked in the future. A store that must wait is polled
        // again, with the task's waker, when the future is.
        let now = match tokio::runtime::Handle::try_current() {
            Ok(_) => decision
                .as_mut()
                .poll(&mut Context::from_waker(futures_task::noop_waker_ref())),
            Err(_) => Poll::Pending,
        };
        match now {
            Poll::Ready(verdict) => next(&self.gate, &mut self.inner, verdict, request),
            Poll::Pending => {
                // The clone that was polled ready is the one called, once
                // the store has decided.
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                State::Deciding {
                    decision,
                    next: Some((inner, request)),
                    gate: Arc::clone(&self.gate),
                }
            }
        }
    }
}

/// The verdict on `plan` of a store that [decides at
/// once](Backend::decides_at_once), reached on this stack frame: no box
/// and no waker, where [`decide`] allocates its future (more than a
/// kilobyte, past the allocator's per-thread cache).
fn decided_here<B: Backend>(gate: &Gate<B>, plan: Plan) -> Verdict {
    let first = plan.first().map_or(0, Planned::rule);
    let admitting = std::pin::pin!(gate.admit(plan));
    match admitting.poll(&mut Context::from_waker(futures_task::noop_waker_ref())) {
        Poll::Ready(verdict) => verdict,
        // A store that broke its word: what it did is left as a store
        // failing mid-request leaves it, and the request is answered as
        // one refused by a failing store, not lost.
        Poll::Pending => {
            tracing::error!("a store that decides at once did not; answered 503");
            gate.unavailable(first, Entries::new())
        }
    }
}

/// What follows the store's `verdict` on `request`: the layer's answer, or
/// `inner` called.
fn next<S, B, ReqBody, ResBody>(
    gate: &Arc<Gate<B>>,
    inner: &mut S,
    verdict: Verdict,
    request: Request<ReqBody>,
) -> State<S, B, ReqBody, ResBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    B: Backend,
{
    match verdict {
        Verdict::Refuse { refusal, entries } => State::Answered {
            response: Some(gate.refused(&refusal, &entries)),
        },
        Verdict::Admit { entries, .. } => State::Serving {
            future: inner.call(request),
            admitted: Some((Arc::clone(gate), entries)),
        },
    }
}

/// What the store decides for a request, with a queue's wait already
/// waited, kept behind a pointer while it waits: the one part of a request
/// whose future belongs to the backend (or to a queue's timer).
type Decision = Pin<Box<dyn Future<Output = Verdict> + Send>>;

/// The rest of a request whose rules settle their costs with the response.
type Settling<ResBody, E> =
    Pin<Box<dyn Future<Output = Result<Response<LimitBody<ResBody>>, E>> + Send>>;

fn decide<B: Backend + 'static>(
    gate: Arc<Gate<B>>,
    plan: Plan,
    started: quanta::Instant,
) -> Decision {
    Box::pin(async move {
        let verdict = gate.admit(plan).await;
        gate.latency.record(started);
        waited(gate, verdict).await
    })
}

/// [`waited`], kept behind a pointer until the queue releases the request.
fn queue<B: Backend + 'static>(gate: Arc<Gate<B>>, verdict: Verdict) -> Decision {
    Box::pin(waited(gate, verdict))
}

/// `verdict`, after the wait in a queue it admits with.
async fn waited<B: Backend + 'static>(gate: Arc<Gate<B>>, verdict: Verdict) -> Verdict {
    match verdict {
        Verdict::Admit { entries, delay } if delay > 0 => {
            let queued = Queued {
                gate,
                entries: Some(entries),
            };
            tokio::time::sleep(Duration::from_nanos(delay)).await;
            Verdict::Admit {
                entries: queued.release(),
                delay: 0,
            }
        }
        verdict => verdict,
    }
}

pin_project! {
    /// The future of a [`RateLimitService`]: the layer's answer, or the
    /// inner service's response with the rate-limit fields added.
    pub struct ResponseFuture<S, B, ReqBody, ResBody>
    where
        S: Service<Request<ReqBody>>,
        B: Backend,
    {
        #[pin]
        state: State<S, B, ReqBody, ResBody>,
    }
}

pin_project! {
    #[project = Step]
    enum State<S, B, ReqBody, ResBody>
    where
        S: Service<Request<ReqBody>>,
        B: Backend,
    {
        // Waiting for the store (and a queue), then calling `next`.
        Deciding {
            decision: Decision,
            next: Option<(S, Request<ReqBody>)>,
            gate: Arc<Gate<B>>,
        },
        // The inner service's response, to which the fields of `admitted`
        // are added.
        Serving {
            #[pin]
            future: S::Future,
            admitted: Option<(Arc<Gate<B>>, Entries)>,
        },
        // Costs settled with the store after the response.
        Settling {
            future: Settling<ResBody, S::Error>,
        },
        // The layer's own answer.
        Answered {
            response: Option<Response<LimitBody<ResBody>>>,
        },
    }
}

impl<S, B, ReqBody, ResBody> Future for ResponseFuture<S, B, ReqBody, ResBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Error: Send + 'static,
    B: Backend + 'static,
    ResBody: Send + 'static,
{
    type Output = Result<Response<LimitBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                Step::Deciding {
                    decision,
                    next,
                    gate,
                } => {
                    let verdict = ready!(decision.as_mut().poll(cx));
                    let (mut inner, request) = next.take().expect("polled after it answered");
                    let gate = Arc::clone(gate);
                    state.set(self::next(&gate, &mut inner, verdict, request));
                }
                Step::Serving { future, admitted } => {
                    let mut response = ready!(future.poll(cx))?;
                    let Some((gate, mut entries)) = admitted.take() else {
                        return Poll::Ready(Ok(response.map(LimitBody::inner)));
                    };
                    if !gate.reconciles() {
                        gate.decorate(response.headers_mut(), &entries);
                        return Poll::Ready(Ok(response.map(LimitBody::inner)));
                    }
                    let future = Box::pin(async move {
                        gate.reconcile(&mut entries, &mut response).await;
                        gate.decorate(response.headers_mut(), &entries);
                        Ok(response.map(LimitBody::inner))
                    });
                    state.set(State::Settling { future });
                }
                Step::Settling { future } => return future.as_mut().poll(cx),
                Step::Answered { response } => {
                    return Poll::Ready(Ok(response.take().expect("polled after it answered")))
                }
            }
        }
    }
}

/// The charges of a request waiting in a queue: given back if the wait is
/// abandoned (the future dropped) rather than [`released`](Queued::release).
struct Queued<B: Backend + 'static> {
    gate: Arc<Gate<B>>,
    entries: Option<Entries>,
}

impl<B: Backend + 'static> Queued<B> {
    fn release(mut self) -> Entries {
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
