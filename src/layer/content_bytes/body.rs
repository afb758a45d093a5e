//! The bodies whose bytes are counted: [`RequestBytes`] as the handler reads, [`ResponseBytes`] as it is sent.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::{capacity, lock, spawn, BoxError, Cut, Settings, SharedRef};
use crate::backend::{Backend, OnBackendError};
use crate::key::Key;
use crate::layer::answer::body::ResponseBody;

/// The request body's account: what was granted, what was read, the grant
/// under way (with the frame it holds back).
pub(super) struct Counting<B: Backend> {
    pub(super) key: Key,
    pub(super) settings: Arc<Settings<B>>,
    pub(super) shared: SharedRef,
    pub(super) granted: u64,
    pub(super) read: u64,
    pub(super) grant: Option<Grant<B>>,
    pub(super) held: Option<Frame<Bytes>>,
}

/// A grant asked of the backend: `asked` bytes, `need` of them needed now.
pub(super) struct Grant<B: Backend> {
    pub(super) check: Pin<Box<B::Future>>,
    pub(super) asked: u32,
    pub(super) need: u64,
}

impl<B: Backend> Counting<B> {
    /// Ask for `ask` bytes, `need` of them needed now.
    fn ask(&mut self, ask: u32, need: u64) {
        let check = self
            .settings
            .backend
            .check(&self.key, &self.settings.policy, ask);
        self.grant = Some(Grant {
            check: Box::pin(check),
            asked: ask,
            need,
        });
    }

    /// Cut the body off: the handler gets an error, the client `cut`'s
    /// answer.
    fn cut(&mut self, cut: Cut) -> BoxError {
        lock(&self.shared).cut = Some(cut);
        // The frame held back is never read: not charged either.
        if let Some(frame) = self.held.take() {
            self.read -= frame.data_ref().map_or(0, |d| d.remaining() as u64);
        }
        Box::new(ContentBytesExceeded(matches!(cut, Cut::TooLarge)))
    }

    /// Give back what was granted but not read.
    fn give_back(&mut self) {
        let unread = self.granted.saturating_sub(self.read);
        self.granted = self.read;
        if unread == 0 {
            return;
        }
        let (key, settings) = (self.key.clone(), self.settings.clone());
        let refund = u32::try_from(unread).unwrap_or(u32::MAX);
        spawn(async move {
            let _ = settings
                .backend
                .settle(&key, &settings.policy, refund, 0)
                .await;
        });
    }
}

impl<B: Backend> Drop for Counting<B> {
    fn drop(&mut self) {
        self.give_back();
    }
}

pin_project! {
    /// A request body whose bytes are counted as the handler reads them
    /// (see [`ContentBytesLayer`]).
    pub struct RequestBytes<Bd, B: Backend> {
        #[pin]
        pub(super) inner: Bd,
        pub(super) counting: Option<Counting<B>>,
    }
}

impl<Bd, B> Body for RequestBytes<Bd, B>
where
    Bd: Body<Data = Bytes>,
    Bd::Error: Into<BoxError>,
    B: Backend,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let Some(counting) = this.counting.as_mut() else {
            return this.inner.poll_frame(cx).map_err(Into::into);
        };
        loop {
            if let Some(grant) = counting.grant.as_mut() {
                let answer = ready!(grant.check.as_mut().poll(cx));
                let (asked, need) = (grant.asked, grant.need);
                counting.grant = None;
                match answer {
                    Ok(decision) if decision.is_allowed() => {
                        counting.granted += u64::from(asked);
                        lock(&counting.shared).last = Some(decision);
                    }
                    // A whole grant no longer fits: exactly what is missing
                    // may.
                    Ok(_) if u64::from(asked) > need => {
                        counting.ask(need as u32, need);
                        continue;
                    }
                    Ok(decision) => {
                        lock(&counting.shared).last = Some(decision);
                        return Poll::Ready(Some(Err(counting.cut(Cut::Limited))));
                    }
                    Err(_) if counting.settings.on_error == OnBackendError::Deny => {
                        return Poll::Ready(Some(Err(counting.cut(Cut::Failed))));
                    }
                    // Failing open: these bytes pass uncounted.
                    Err(_) => counting.granted = counting.read,
                }
                if let Some(frame) = counting.held.take() {
                    return Poll::Ready(Some(Ok(frame)));
                }
            }
            let frame = match ready!(this.inner.as_mut().poll_frame(cx)) {
                None => {
                    counting.give_back();
                    return Poll::Ready(None);
                }
                Some(Err(error)) => return Poll::Ready(Some(Err(error.into()))),
                Some(Ok(frame)) => frame,
            };
            let len = frame.data_ref().map_or(0, |d| d.remaining() as u64);
            counting.read += len;
            if counting.read <= counting.granted {
                return Poll::Ready(Some(Ok(frame)));
            }
            let need = counting.read - counting.granted;
            counting.held = Some(frame);
            if counting.read > capacity(&counting.settings.policy) {
                return Poll::Ready(Some(Err(counting.cut(Cut::TooLarge))));
            }
            // Within the capacity, so within u32.
            let ask = need
                .max(u64::from(counting.settings.min_grant))
                .min(u64::from(u32::MAX));
            counting.ask(ask as u32, need);
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<Bd, B: Backend> fmt::Debug for RequestBytes<Bd, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestBytes").finish_non_exhaustive()
    }
}

/// The error a handler reads from a request body cut off by its limit.
#[derive(Debug)]
pub struct ContentBytesExceeded(bool);

impl ContentBytesExceeded {
    /// Whether the body is larger than the limit can ever hold (the client
    /// gets 413), rather than larger than what is left of it now (429).
    pub fn is_too_large(&self) -> bool {
        self.0
    }
}

impl fmt::Display for ContentBytesExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 {
            f.write_str("the request body is larger than its limit in bytes")
        } else {
            f.write_str("the request body exceeds what is left of its limit in bytes")
        }
    }
}

impl std::error::Error for ContentBytesExceeded {}

/// What a response body's bytes are charged to once it is sent.
pub(super) struct Charge<B: Backend> {
    pub(super) key: Key,
    pub(super) settings: Arc<Settings<B>>,
    pub(super) sent: u64,
}

impl<B: Backend> Drop for Charge<B> {
    fn drop(&mut self) {
        if self.sent == 0 {
            return;
        }
        let (key, settings) = (self.key.clone(), self.settings.clone());
        let sent = u32::try_from(self.sent).unwrap_or(u32::MAX);
        spawn(async move {
            let _ = settings
                .backend
                .settle(&key, &settings.policy, 0, sent)
                .await;
        });
    }
}

pin_project! {
    /// A response body from a [`ContentBytes`] service: the handler's,
    /// counted as it is sent and charged when it ends (or is dropped), or
    /// the limiter's own answer.
    pub struct ResponseBytes<Bd, B: Backend> {
        #[pin]
        pub(super) body: ResponseBody<Bd>,
        pub(super) charge: Option<Charge<B>>,
    }
}

impl<Bd, B: Backend> ResponseBytes<Bd, B> {
    pub(super) fn limiter(data: Bytes) -> Self {
        Self {
            body: ResponseBody::limiter(data),
            charge: None,
        }
    }
}

impl<Bd: Body<Data = Bytes>, B: Backend> Body for ResponseBytes<Bd, B> {
    type Data = Bytes;
    type Error = Bd::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Bd::Error>>> {
        let this = self.project();
        let frame = ready!(this.body.poll_frame(cx));
        match (&frame, this.charge.as_mut()) {
            (Some(Ok(frame)), Some(charge)) => {
                charge.sent += frame.data_ref().map_or(0, |d| d.remaining() as u64);
            }
            // Sent: charged now (by dropping the charge).
            (None, _) => drop(this.charge.take()),
            _ => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl<Bd, B: Backend> fmt::Debug for ResponseBytes<Bd, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseBytes").finish_non_exhaustive()
    }
}
