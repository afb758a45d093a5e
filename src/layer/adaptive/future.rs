//! `ObservedFuture`: a response, classified and recorded when it arrives.

use std::future::Future;
use std::pin::Pin;

use std::task::{ready, Context, Poll};
use std::time::Instant;

use http::Response;
use pin_project_lite::pin_project;

use super::limits::Adaptive;
use super::window::ClientId;

pin_project! {
    /// The future of an [`Observed`] call.
    pub struct ObservedFuture<F> {
        #[pin]
        pub(super) call: F,
        pub(super) adaptive: Option<Adaptive>,
        pub(super) client: ClientId,
        pub(super) start: Instant,
    }

    impl<F> PinnedDrop for ObservedFuture<F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // Dropped unanswered past the latency target: the client gave
            // up on a slow service, a timeout.
            if let Some(adaptive) = this.adaptive.take() {
                if adaptive.inner.classifier.is_too_slow(this.start.elapsed()) {
                    adaptive.record(*this.client, true);
                }
            }
        }
    }
}

impl<F, ResB, E> Future for ObservedFuture<F>
where
    F: Future<Output = Result<Response<ResB>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let output = ready!(this.call.poll(cx));
        if let Some(adaptive) = this.adaptive.take() {
            let latency = this.start.elapsed();
            let failed = match &output {
                Ok(response) => adaptive.inner.classifier.is_failure(
                    response.status(),
                    response.headers(),
                    latency,
                ),
                Err(_) => true,
            };
            adaptive.record(*this.client, failed);
        }
        Poll::Ready(output)
    }
}
