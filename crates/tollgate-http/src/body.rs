//! [`LimitBody`]: the response body of a limited service, either the inner
//! service's or the layer's own answer.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

pin_project! {
    /// The inner service's body, or the few bytes of a refusal.
    #[project = Proj]
    pub enum LimitBody<B> {
        /// The inner service answered.
        Inner {
            #[pin]
            body: B,
        },
        /// The layer answered.
        Answer {
            bytes: Option<Bytes>,
        },
    }
}

impl<B> LimitBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        LimitBody::Inner { body }
    }

    pub(crate) fn answer(bytes: Bytes) -> Self {
        LimitBody::Answer {
            bytes: (!bytes.is_empty()).then_some(bytes),
        }
    }
}

impl<B: Body<Data = Bytes>> Body for LimitBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.project() {
            Proj::Inner { body } => body.poll_frame(cx),
            Proj::Answer { bytes } => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            LimitBody::Inner { body } => body.is_end_stream(),
            LimitBody::Answer { bytes } => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            LimitBody::Inner { body } => body.size_hint(),
            LimitBody::Answer { bytes } => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}
