//! [`LimitBody`]: the response body of a limited service, either the inner
//! service's or the layer's own answer.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

pin_project! {
    /// The inner service's body, or the few bytes of a refusal.
    pub struct LimitBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = Proj]
    enum Kind<B> {
        Inner {
            #[pin]
            body: B,
        },
        Answer {
            bytes: Option<Bytes>,
        },
    }
}

impl<B> LimitBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        LimitBody {
            kind: Kind::Inner { body },
        }
    }

    pub(crate) fn answer(bytes: Bytes) -> Self {
        let bytes = (!bytes.is_empty()).then_some(bytes);
        LimitBody {
            kind: Kind::Answer { bytes },
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
        match self.project().kind.project() {
            Proj::Inner { body } => body.poll_frame(cx),
            Proj::Answer { bytes } => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Answer { bytes } => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Answer { bytes } => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}
