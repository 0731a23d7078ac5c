//! The last 429 each thread made, kept to answer the next equal refusal.
//!
//! A flood of refused requests mostly gets one answer: for a rule of one
//! request a second or faster, every refusal waits 1 s, so its
//! `Retry-After`, its `RateLimit` field and its problem+json body are the
//! same bytes for every client the rule refuses in that second. Making them
//! again (the body written, each value cut and checked, each field hashed
//! into a new map) cost about a third of what the layer adds to a refusal.
//! So the answer's fields and body are kept per thread with what they were
//! made from, and an equal refusal clones them: the map in two allocations,
//! each value by a reference count.
//!
//! Only answers that are a function of [`Recall`]'s numbers are kept: a 429
//! showing one rule, without a partition key (whose digest differs per
//! key), with the layer's own body (a writer of the user's may answer
//! differently each time, so it is called for every refusal).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::HeaderMap;

/// What a kept answer was made from: equal, the answer is the same bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recall {
    /// The layer's [`layer_id`]: rule numbers are its own.
    pub(crate) layer: u64,
    /// The one rule shown.
    pub(crate) rule: usize,
    /// `Retry-After`, in seconds.
    pub(crate) retry_after: u64,
    /// The rule's `r` and `t`.
    pub(crate) remaining: u64,
    pub(crate) reset: u64,
}

thread_local! {
    static LAST: RefCell<Option<(Recall, HeaderMap, Bytes)>> = const { RefCell::new(None) };
}

/// A number no other layer of this process has, for [`Recall::layer`]: an
/// address could be reused by a layer built after one was dropped.
pub(crate) fn layer_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The fields and body of the answer made from `recall`, kept from the
/// last one this thread made, or made by `make` and kept.
pub(crate) fn answer(
    recall: Recall,
    make: impl FnOnce() -> (HeaderMap, Bytes),
) -> (HeaderMap, Bytes) {
    let kept = LAST.with_borrow(|last| match last {
        Some((made_from, fields, body)) if *made_from == recall => {
            Some((fields.clone(), body.clone()))
        }
        _ => None,
    });
    if let Some(answer) = kept {
        return answer;
    }
    let (fields, body) = make();
    LAST.set(Some((recall, fields.clone(), body.clone())));
    (fields, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn recall(retry_after: u64) -> Recall {
        Recall {
            layer: 7,
            rule: 0,
            retry_after,
            remaining: 0,
            reset: retry_after,
        }
    }

    fn made(text: &'static str) -> (HeaderMap, Bytes) {
        let mut fields = HeaderMap::new();
        fields.insert(http::header::RETRY_AFTER, HeaderValue::from_static(text));
        (fields, Bytes::from_static(text.as_bytes()))
    }

    #[test]
    fn an_equal_refusal_reuses_the_answer_and_any_other_makes_its_own() {
        let (first, _) = answer(recall(1), || made("1"));
        let (again, body) = answer(recall(1), || panic!("made again"));
        assert_eq!(again, first);
        assert_eq!(body, "1");
        let mut calls = 0;
        for other in [
            Recall {
                layer: 8,
                ..recall(1)
            },
            Recall {
                rule: 1,
                ..recall(1)
            },
            recall(2),
            Recall {
                remaining: 1,
                ..recall(1)
            },
            Recall {
                reset: 9,
                ..recall(1)
            },
        ] {
            answer(other, || {
                calls += 1;
                made("other")
            });
        }
        assert_eq!(calls, 5);
    }

    #[test]
    fn layers_have_their_own_numbers() {
        assert_ne!(layer_id(), layer_id());
    }
}
