//! [`ContentBytesFuture`]: the decision acted on, the handler called, its answer made.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Response, Uri};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::body::{Charge, Counting, RequestBytes, ResponseBytes};
use super::{lock, Cut, Settings, Shared, SharedRef};
use crate::backend::{Backend, BackendError, OnBackendError};
use crate::clock::Micros;
use crate::key::Key;
use crate::layer::answer::body::ResponseBody;
use crate::layer::answer::headers;
use crate::layer::answer::response::{self, Refused};
use crate::layer::callee::{Callee, Taken};
use crate::{key::RequestHead, Decision};

/// A request until its decision is acted on, with the service `I` it is
/// to be called with.
pub(super) struct Pending<I, ReqB, B> {
    pub(super) inner: I,
    pub(super) req: Request<ReqB>,
    pub(super) key: Key,
    pub(super) reserved: u32,
    pub(super) settings: Arc<Settings<B>>,
}

impl<I, ReqB, B> Pending<I, ReqB, B>
where
    I: Callee,
    I::Service: Service<Request<RequestBytes<ReqB, B>>>,
    B: Backend,
{
    /// The call, or the limiter's answer, once the backend has answered.
    pub(super) fn answered(
        self,
        answer: Result<Decision, BackendError>,
    ) -> State<I::Service, ReqB, B> {
        let settings = &self.settings;
        let (decision, reserved, counted) = match answer {
            Ok(decision) if decision.is_allowed() => (Some(decision), self.reserved, true),
            Ok(decision) => {
                let head = RequestHead::from(&self.req);
                let refused = Refused {
                    decision: &decision,
                    policy: &settings.policy,
                    key: &self.key,
                    request: &head,
                };
                let response = settings
                    .limited
                    .respond(&refused, settings.headers, Micros::ZERO);
                return State::Respond {
                    response: Some(response),
                };
            }
            Err(_) if settings.on_error == OnBackendError::Deny => {
                return State::Respond {
                    response: Some(response::unavailable()),
                };
            }
            // Failing open: this request's bytes go uncounted.
            Err(_) => (None, 0, false),
        };
        let shared = Arc::new(Mutex::new(Shared {
            last: decision,
            cut: None,
        }));
        let (method, uri) = (self.req.method().clone(), self.req.uri().clone());
        let counting = (counted && settings.requests).then(|| Counting {
            key: self.key.clone(),
            settings: settings.clone(),
            shared: shared.clone(),
            granted: u64::from(reserved),
            read: 0,
            grant: None,
            held: None,
        });
        let req = self.req.map(|body| RequestBytes {
            inner: body,
            counting,
        });
        let mut inner = self.inner;
        let call = inner.service().call(req);
        let after = After {
            shared,
            key: self.key,
            settings: self.settings,
            method,
            uri,
        };
        State::Call {
            call,
            after: Some(after),
        }
    }
}

pin_project! {
    /// The future of a [`ContentBytes`] call.
    pub struct ContentBytesFuture<S, ReqB, B>
    where
        S: Service<Request<RequestBytes<ReqB, B>>>,
        B: Backend,
    {
        #[pin]
        pub(super) state: State<S, ReqB, B>,
    }
}

pin_project! {
    #[project = StateProj]
    pub(super) enum State<S, ReqB, B>
    where
        S: Service<Request<RequestBytes<ReqB, B>>>,
        B: Backend,
    {
        Check {
            #[pin]
            check: B::Future,
            pending: Option<Pending<Taken<S>, ReqB, B>>,
        },
        Call {
            #[pin]
            call: S::Future,
            after: Option<After<B>>,
        },
        Respond {
            response: Option<Response<Bytes>>,
        },
    }
}

/// What answering an admitted request takes once its handler is done.
pub(super) struct After<B> {
    pub(super) shared: SharedRef,
    pub(super) key: Key,
    pub(super) settings: Arc<Settings<B>>,
    pub(super) method: Method,
    pub(super) uri: Uri,
}

impl<S, ReqB, B> ContentBytesFuture<S, ReqB, B>
where
    S: Service<Request<RequestBytes<ReqB, B>>>,
    B: Backend,
{
    pub(super) fn respond(response: Response<Bytes>) -> Self {
        Self {
            state: State::Respond {
                response: Some(response),
            },
        }
    }
}

impl<S, ReqB, ResB, B> Future for ContentBytesFuture<S, ReqB, B>
where
    S: Service<Request<RequestBytes<ReqB, B>>, Response = Response<ResB>>,
    B: Backend,
{
    type Output = Result<Response<ResponseBytes<ResB, B>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Check { check, pending } => {
                    let answer = ready!(check.poll(cx));
                    let p = pending.take().expect("polled after completion");
                    this.state.set(p.answered(answer));
                }
                StateProj::Call { call, after } => {
                    let response = ready!(call.poll(cx))?;
                    let after = after.take().expect("polled after completion");
                    return Poll::Ready(Ok(after.answer(response)));
                }
                StateProj::Respond { response } => {
                    let response = response.take().expect("polled after completion");
                    return Poll::Ready(Ok(response.map(ResponseBytes::limiter)));
                }
            }
        }
    }
}

impl<B: Backend> After<B> {
    /// The handler's response with the quota headers and its body counted;
    /// or, when its request body was cut off, the limiter's answer instead.
    pub(super) fn answer<ResB>(
        self,
        mut response: Response<ResB>,
    ) -> Response<ResponseBytes<ResB, B>> {
        let (last, cut) = {
            let shared = lock(&self.shared);
            (shared.last.clone(), shared.cut)
        };
        let settings = &self.settings;
        if let Some(cut) = cut {
            let answer = match (cut, last) {
                // The denial that cut the body off is the shared `last`.
                (Cut::Limited, Some(decision)) => {
                    let request = Request::builder()
                        .method(self.method)
                        .uri(self.uri)
                        .body(())
                        .unwrap_or_default();
                    let refused = Refused {
                        decision: &decision,
                        policy: &settings.policy,
                        key: &self.key,
                        request: &RequestHead::from(&request),
                    };
                    settings
                        .limited
                        .respond(&refused, settings.headers, Micros::ZERO)
                }
                (Cut::TooLarge, _) => response::payload_too_large(&settings.policy),
                (Cut::Failed | Cut::Limited, _) => response::unavailable(),
            };
            return answer.map(ResponseBytes::limiter);
        }
        if let Some(decision) = &last {
            headers::write(
                response.headers_mut(),
                settings.headers,
                &settings.policy,
                decision,
            );
        }
        let counting = (settings.responses && last.is_some()).then(|| Charge {
            key: self.key,
            settings: self.settings.clone(),
            sent: 0,
        });
        response.map(|body| ResponseBytes {
            body: ResponseBody::holding(body, None),
            charge: counting,
        })
    }
}
