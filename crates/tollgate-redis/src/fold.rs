//! Folding the calls made at the same moment into one: a caller alone sends
//! at once; callers arriving while `flights` calls are already in flight
//! queue, and when a flight lands the queue (up to `max` calls) leaves as
//! one fold, sent by one of its own callers (no task of its own, no extra
//! wake-up), whose reply is split back to each. As with the multiplexed
//! connection's own batching, nothing waits for company: a fold is only what
//! piled up while the previous one was in the air.
//!
//! Generic over the call and its result so that the hand-off can be tested
//! without a server.

use std::collections::VecDeque;
use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tokio::sync::oneshot;

/// The queue of calls waiting for a flight, shared by every clone of a
/// backend.
pub(crate) struct Folder<C, R> {
    /// Most calls per fold.
    max: usize,
    /// Most folds in flight at once: while fewer fly, a call leaves at once.
    flights: usize,
    state: Mutex<State<C, R>>,
}

struct State<C, R> {
    flying: usize,
    queue: VecDeque<Member<C, R>>,
}

/// A call in a fold, and where its result goes (`None` for the caller
/// sending the fold, which keeps its own).
struct Member<C, R> {
    call: C,
    reply: Option<oneshot::Sender<Handoff<C, R>>>,
}

impl<C, R> Member<C, R> {
    /// Whether a caller still waits for this call (a caller that gave up
    /// before its call left is never sent).
    fn wanted(&self) -> bool {
        self.reply.as_ref().is_some_and(|r| !r.is_closed())
    }
}

/// What a queued caller is woken with.
enum Handoff<C, R> {
    /// Its call's result, from the fold that carried it.
    Done(R),
    /// A fold to send, its own call among them.
    Lead(Fold<C, R>),
}

/// Calls leaving together, holding one flight: dropped (sent or not), it
/// gives the flight to the next fold, and puts back in the queue those of
/// its calls still waiting.
struct Fold<C, R> {
    folder: Option<Arc<Folder<C, R>>>,
    members: Vec<Member<C, R>>,
}

impl<C, R> Drop for Fold<C, R> {
    fn drop(&mut self) {
        if let Some(folder) = self.folder.take() {
            folder.land(mem::take(&mut self.members));
        }
    }
}

impl<C: Send + 'static, R: Send + 'static> Folder<C, R> {
    /// A folder of at most `max` calls per fold and `flights` folds in
    /// flight (each at least 1).
    pub(crate) fn new(max: usize, flights: usize) -> Arc<Self> {
        Arc::new(Folder {
            max: max.max(1),
            flights: flights.max(1),
            state: Mutex::new(State {
                flying: 0,
                queue: VecDeque::new(),
            }),
        })
    }

    /// Runs `call`, alone or folded with others, and returns its result;
    /// `send` sends a fold's calls (in queue order) and returns one result
    /// per call, in the same order. `None` if the fold carrying the call
    /// was lost (its sender dropped with no runtime left to finish it).
    pub(crate) async fn run<S, F>(self: &Arc<Self>, call: C, send: S) -> Option<R>
    where
        S: FnOnce(Vec<C>) -> F,
        F: Future<Output = Vec<R>> + Send + 'static,
    {
        let queued = {
            let mut state = self.lock();
            if state.flying < self.flights {
                state.flying += 1;
                Err(call)
            } else {
                let (tx, rx) = oneshot::channel();
                state.queue.push_back(Member {
                    call,
                    reply: Some(tx),
                });
                Ok(rx)
            }
        };
        let fold = match queued {
            Err(call) => Fold {
                folder: Some(self.clone()),
                members: vec![Member { call, reply: None }],
            },
            Ok(rx) => match rx.await.ok()? {
                Handoff::Done(result) => return Some(result),
                Handoff::Lead(fold) => fold,
            },
        };
        fly(fold, send).await
    }
}

impl<C, R> Folder<C, R> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<C, R>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A flight has landed: `back` (the calls of a fold never sent) go to
    /// the head of the queue, and the next fold takes the flight, sent by
    /// its first caller still waiting.
    fn land(self: &Arc<Self>, back: Vec<Member<C, R>>) {
        let mut state = self.lock();
        for m in back.into_iter().rev().filter(Member::wanted) {
            state.queue.push_front(m);
        }
        loop {
            let mut members = Vec::with_capacity(self.max.min(state.queue.len()));
            while members.len() < self.max {
                match state.queue.pop_front() {
                    Some(m) if m.wanted() => members.push(m),
                    Some(_) => {}
                    None => break,
                }
            }
            let Some(leader) = members.first_mut().and_then(|m| m.reply.take()) else {
                state.flying -= 1;
                return;
            };
            let fold = Fold {
                folder: Some(self.clone()),
                members,
            };
            let Err(Handoff::Lead(mut fold)) = leader.send(Handoff::Lead(fold)) else {
                return;
            };
            // Its caller gave up since: the others wait for the next one.
            fold.folder = None;
            for m in mem::take(&mut fold.members).into_iter().skip(1).rev() {
                state.queue.push_front(m);
            }
        }
    }
}

/// Sends `fold` and hands each of its other callers its result; returns the
/// sender's own. A fold of others is finished even if its sender is dropped
/// (its callers wait for it): the rest of the flight then runs as a task.
async fn fly<C, R, S, F>(mut fold: Fold<C, R>, send: S) -> Option<R>
where
    C: Send + 'static,
    R: Send + 'static,
    S: FnOnce(Vec<C>) -> F,
    F: Future<Output = Vec<R>> + Send + 'static,
{
    let members = mem::take(&mut fold.members);
    let (calls, replies): (Vec<C>, Vec<_>) = members.into_iter().map(|m| (m.call, m.reply)).unzip();
    let sent = send(calls);
    if replies.len() == 1 {
        // Alone: nobody else waits, so dropping the caller may drop the call.
        let own = sent.await.into_iter().next();
        drop(fold);
        return own;
    }
    let work = async move {
        let mut own = None;
        for (result, reply) in sent.await.into_iter().zip(replies) {
            match reply {
                Some(to) => drop(to.send(Handoff::Done(result))),
                None => own = Some(result),
            }
        }
        drop(fold);
        own
    };
    Finished(Some(Box::pin(work))).await
}

/// A future run to its end: dropped early, the rest runs as a task.
struct Finished<R: Send + 'static>(Option<Pin<Box<dyn Future<Output = Option<R>> + Send>>>);

impl<R: Send + 'static> Future for Finished<R> {
    type Output = Option<R>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<R>> {
        let Some(work) = self.0.as_mut() else {
            return Poll::Ready(None);
        };
        let out = work.as_mut().poll(cx);
        if out.is_ready() {
            self.0 = None;
        }
        out
    }
}

impl<R: Send + 'static> Drop for Finished<R> {
    fn drop(&mut self) {
        if let (Some(work), Ok(rt)) = (self.0.take(), tokio::runtime::Handle::try_current()) {
            rt.spawn(work);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::Semaphore;
    use tokio::task::JoinHandle;

    /// A fake store: records each fold as it leaves, lands a flight for
    /// each permit given, and answers a call `c` with `10 c`.
    #[derive(Clone)]
    struct Store {
        folds: Arc<Mutex<Vec<Vec<u32>>>>,
        gate: Arc<Semaphore>,
    }

    impl Store {
        fn new() -> Self {
            Store {
                folds: Arc::default(),
                gate: Arc::new(Semaphore::new(0)),
            }
        }

        fn send(&self, calls: Vec<u32>) -> impl Future<Output = Vec<u32>> + Send + 'static {
            self.folds.lock().unwrap().push(calls.clone());
            let gate = self.gate.clone();
            async move {
                gate.acquire().await.unwrap().forget();
                calls.iter().map(|c| c * 10).collect()
            }
        }

        fn folds(&self) -> Vec<Vec<u32>> {
            self.folds.lock().unwrap().clone()
        }

        /// Starts `call` on `folder` as a task of its own.
        fn call(&self, folder: &Arc<Folder<u32, u32>>, call: u32) -> JoinHandle<Option<u32>> {
            let (store, folder) = (self.clone(), folder.clone());
            tokio::spawn(async move { folder.run(call, |calls| store.send(calls)).await })
        }
    }

    /// Lets every other task run until nothing changes.
    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    fn queued(folder: &Folder<u32, u32>) -> Vec<u32> {
        folder.lock().queue.iter().map(|m| m.call).collect()
    }

    #[tokio::test]
    async fn callers_alone_are_sent_at_once_up_to_the_flights() {
        let (store, folder) = (Store::new(), Folder::new(8, 2));
        let a = store.call(&folder, 1);
        let b = store.call(&folder, 2);
        let c = store.call(&folder, 3);
        settle().await;
        assert_eq!(store.folds(), [vec![1], vec![2]]);
        assert_eq!(queued(&folder), [3]);
        store.gate.add_permits(3);
        assert_eq!(a.await.unwrap(), Some(10));
        assert_eq!(b.await.unwrap(), Some(20));
        assert_eq!(c.await.unwrap(), Some(30));
        assert_eq!(store.folds()[2], [3]);
        assert_eq!(folder.lock().flying, 0);
    }

    #[tokio::test]
    async fn calls_queued_behind_a_flight_leave_together_in_order_at_most_max() {
        let (store, folder) = (Store::new(), Folder::new(3, 1));
        let first = store.call(&folder, 0);
        settle().await;
        let rest: Vec<_> = (1..=5).map(|c| store.call(&folder, c)).collect();
        settle().await;
        let order = queued(&folder);
        assert_eq!(order.len(), 5);
        store.gate.add_permits(3);
        assert_eq!(first.await.unwrap(), Some(0));
        for (c, task) in (1..=5).zip(rest) {
            assert_eq!(task.await.unwrap(), Some(c * 10), "call {c}");
        }
        assert_eq!(
            store.folds(),
            [vec![0], order[..3].to_vec(), order[3..].to_vec()]
        );
        assert_eq!(folder.lock().flying, 0);
    }

    #[tokio::test]
    async fn a_caller_that_gave_up_is_never_sent() {
        let (store, folder) = (Store::new(), Folder::new(8, 1));
        let first = store.call(&folder, 0);
        settle().await;
        let rest: Vec<_> = (1..=3).map(|c| store.call(&folder, c)).collect();
        settle().await;
        let gone = queued(&folder)[0];
        rest[gone as usize - 1].abort();
        settle().await;
        store.gate.add_permits(2);
        assert_eq!(first.await.unwrap(), Some(0));
        for (c, task) in (1..=3).zip(rest) {
            if c != gone {
                assert_eq!(task.await.unwrap(), Some(c * 10));
            }
        }
        let folds = store.folds();
        assert_eq!(folds.len(), 2);
        assert!(
            !folds[1].contains(&gone) && folds[1].len() == 2,
            "{folds:?}"
        );
    }

    #[tokio::test]
    async fn a_fold_whose_sender_is_dropped_still_answers_the_others() {
        let (store, folder) = (Store::new(), Folder::new(8, 1));
        let first = store.call(&folder, 0);
        settle().await;
        let rest: Vec<_> = (1..=3).map(|c| store.call(&folder, c)).collect();
        settle().await;
        let sender = queued(&folder)[0];
        store.gate.add_permits(1);
        assert_eq!(first.await.unwrap(), Some(0));
        settle().await;
        assert_eq!(store.folds().len(), 2, "the fold is in flight");
        rest[sender as usize - 1].abort();
        settle().await;
        store.gate.add_permits(1);
        for (c, task) in (1..=3).zip(rest) {
            if c != sender {
                assert_eq!(task.await.unwrap(), Some(c * 10));
            }
        }
        // The flight was handed back: the next call leaves at once.
        store.gate.add_permits(1);
        assert_eq!(store.call(&folder, 9).await.unwrap(), Some(90));
        assert_eq!(store.folds().len(), 3);
    }
}
