//! The response body: the inner service's, or the limiter's own.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::permit::Held;

pin_project! {
    /// The body of a response from [`RateLimit`](crate::layer::RateLimit): the inner
    /// service's body, or the limiter's own (a 429, a rejected key).
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
        // A permit of a limit of requests in flight, given back when the
        // body ends or is dropped.
        permit: Option<Held>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Limiter { data: Option<Bytes> },
    }
}

impl<B> ResponseBody<B> {
    /// The inner body, holding `permit` until it ends or is dropped.
    pub(crate) fn holding(body: B, permit: Option<Held>) -> Self {
        Self {
            kind: Kind::Inner { body },
            permit,
        }
    }

    pub(crate) fn limiter(data: Bytes) -> Self {
        let data = (!data.is_empty()).then_some(data);
        Self {
            kind: Kind::Limiter { data },
            permit: None,
        }
    }

    /// The inner body when nothing rides with it (no permit, not the
    /// limiter's own), else this body as it is.
    #[cfg(feature = "axum")]
    pub(crate) fn into_plain(self) -> Result<B, Self> {
        match self {
            Self {
                kind: Kind::Inner { body },
                permit: None,
            } => Ok(body),
            other => Err(other),
        }
    }

    /// Whether the limiter, not the inner service, wrote this body.
    pub fn is_from_limiter(&self) -> bool {
        matches!(self.kind, Kind::Limiter { .. })
    }
}

impl<B: Body<Data = Bytes>> Body for ResponseBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        let frame = match this.kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Limiter { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        };
        if let Poll::Ready(None) = frame {
            // Sent completely: the request is over.
            this.permit.take();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Limiter { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Limiter { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody")
            .field("from_limiter", &self.is_from_limiter())
            .finish()
    }
}
