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

impl<B: From<Bytes>> LimitBody<B> {
    /// The body in the inner service's own type: the inner service's body
    /// as it was, or the layer's answer made one with `B::from`. A service
    /// whose body type can hold bytes (axum's `Body` can) keeps one body
    /// type end to end this way, rather than boxing the wrapper again.
    ///
    /// ```
    /// use axum::body::Body;
    /// use tollgate_http::LimitBody;
    ///
    /// fn unwrapped(response: http::Response<LimitBody<Body>>) -> http::Response<Body> {
    ///     response.map(LimitBody::into_inner)
    /// }
    /// ```
    pub fn into_inner(self) -> B {
        match self.kind {
            Kind::Inner { body } => body,
            Kind::Answer { bytes } => B::from(bytes.unwrap_or_default()),
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

#[cfg(test)]
mod tests {
    use axum::body::Body as AxumBody;
    use http_body_util::BodyExt;

    use super::*;

    async fn text(body: AxumBody) -> (Option<u64>, String) {
        let exact = body.size_hint().exact();
        let bytes = body.collect().await.unwrap().to_bytes();
        (exact, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn into_inner_keeps_the_inner_body_and_makes_the_answer_one() {
        let inner = LimitBody::inner(AxumBody::from("from the service")).into_inner();
        assert_eq!(text(inner).await, (Some(16), "from the service".into()));
        let answer = LimitBody::<AxumBody>::answer(Bytes::from_static(b"{\"status\":429}"));
        assert_eq!(
            text(answer.into_inner()).await,
            (Some(14), "{\"status\":429}".into())
        );
        let empty = LimitBody::<AxumBody>::answer(Bytes::new()).into_inner();
        assert!(empty.is_end_stream());
        assert_eq!(text(empty).await, (Some(0), String::new()));
    }
}
