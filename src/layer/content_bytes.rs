//! [`ContentBytesLayer`]: limits counted in bytes of content — request
//! bodies as they stream in, response bodies once they are sent.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use super::body::ResponseBody;
use super::callee::{Callee, Taken};
use super::headers::{self, HeaderStyle};
use super::response::{self, LimitedResponse, Refused};
use crate::backend::{Backend, BackendError, MemoryBackend, OnBackendError};
use crate::clock::Micros;
use crate::key::{ClientIp, Key, KeyExtractor};
use crate::{key::RequestHead, Decision, Policy};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Limits in bytes of content, in and out.
///
///
/// A request is checked before its handler runs at what its
/// `Content-Length` declares (0 without one): a body larger than a limit
/// can ever hold is refused with 413 at once, one larger than what is left
/// with 429, and a client in debt is refused with 429. The declaration is
/// only a first reservation: the body is counted as it is read, frame by
/// frame, and whatever passes the reservation is asked of the backend in
/// grants of at least [`min_grant`](ContentBytesLayer::min_grant) bytes
/// (exactly what is missing, when a whole grant no longer fits). When
/// nothing more fits, the body ends with an error in the handler, and the
/// layer answers 429 (or 413, for a body larger than the limit) instead of
/// whatever the handler made of it. When the body ends, or is dropped
/// unread, what was granted but not read is given back: a request is
/// charged exactly the bytes its handler read, and a client never gets more
/// bytes through than the limit allows.
///
/// A response body's bytes are counted as they are sent and charged once
/// it ends (or is dropped): past the limit if need be, as a debt that the
/// client's next requests wait out (see
/// [`Backend::settle`](crate::backend::Backend::settle)).
///
/// The quota headers carry the unit: `RateLimit-Policy:
/// "upload";q=1000000;w=60;qu="content-bytes"`.
///
/// ```
/// use axum::{routing::post, Router};
/// use tower_ratelimit::key::Header;
/// use tower_ratelimit::layer::ContentBytesLayer;
/// use tower_ratelimit::Policy;
///
/// // 10 MB a minute per user, in and out.
/// let bytes = ContentBytesLayer::new("transfer = 10000000/min".parse::<Policy>()?)
///     .key(Header::new("x-user-id"));
/// let app: Router = Router::new()
///     .route("/upload", post(|body: axum::body::Bytes| async move { body.len().to_string() }))
///     .layer(bytes);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct ContentBytesLayer<K = ClientIp, B = MemoryBackend> {
    key: K,
    settings: Settings<B>,
}

/// What every request of a layer shares.
#[derive(Clone, Debug)]
struct Settings<B> {
    policy: Policy,
    backend: B,
    requests: bool,
    responses: bool,
    min_grant: u32,
    headers: HeaderStyle,
    on_error: OnBackendError,
    limited: LimitedResponse,
}

impl ContentBytesLayer {
    /// `policy`'s limits counted in bytes (its numbers are bytes: `"upload
    /// = 1000000/min"` is a megabyte a minute), per client IP, in memory.
    pub fn new(policy: Policy) -> Self {
        Self {
            key: ClientIp::new(),
            settings: Settings {
                policy: policy.in_bytes(),
                backend: MemoryBackend::new(),
                requests: true,
                responses: true,
                min_grant: 64 * 1024,
                headers: HeaderStyle::default(),
                on_error: OnBackendError::default(),
                limited: LimitedResponse::default(),
            },
        }
    }
}

impl<K, B> ContentBytesLayer<K, B> {
    /// Count each request against `key`'s bytes.
    pub fn key<K2: KeyExtractor>(self, key: K2) -> ContentBytesLayer<K2, B> {
        ContentBytesLayer {
            key,
            settings: self.settings,
        }
    }

    /// Keep the counts in `backend` (Redis, to share them among servers).
    pub fn backend<B2: Backend>(self, backend: B2) -> ContentBytesLayer<K, B2> {
        let s = self.settings;
        ContentBytesLayer {
            key: self.key,
            settings: Settings {
                backend,
                policy: s.policy,
                requests: s.requests,
                responses: s.responses,
                min_grant: s.min_grant,
                headers: s.headers,
                on_error: s.on_error,
                limited: s.limited,
            },
        }
    }

    /// Whether request bodies count (default: yes).
    pub fn requests(mut self, count: bool) -> Self {
        self.settings.requests = count;
        self
    }

    /// Whether response bodies count (default: yes).
    pub fn responses(mut self, count: bool) -> Self {
        self.settings.responses = count;
        self
    }

    /// The fewest bytes a grant asks the backend for while a body streams
    /// past its reservation (default 64 KiB): fewer calls to the store, at
    /// the price of holding up to this much of the budget until the body
    /// ends.
    pub fn min_grant(mut self, bytes: u32) -> Self {
        self.settings.min_grant = bytes.max(1);
        self
    }

    /// Which quota headers to send (default: the `X-RateLimit-*` ones).
    pub fn headers(mut self, style: HeaderStyle) -> Self {
        self.settings.headers = style;
        self
    }

    /// What to do when the backend cannot decide (default: let the bytes
    /// through uncounted; [`Deny`](OnBackendError::Deny): 503 before the
    /// handler, a cut-off body while it reads).
    pub fn on_backend_error(mut self, action: OnBackendError) -> Self {
        self.settings.on_error = action;
        self
    }
}

impl<S, K: Clone, B: Clone> Layer<S> for ContentBytesLayer<K, B> {
    type Service = ContentBytes<S, K, B>;

    fn layer(&self, inner: S) -> Self::Service {
        ContentBytes {
            inner,
            key: self.key.clone(),
            settings: Arc::new(self.settings.clone()),
        }
    }
}

/// The service a [`ContentBytesLayer`] makes.
#[derive(Clone, Debug)]
pub struct ContentBytes<S, K, B> {
    inner: S,
    key: K,
    settings: Arc<Settings<B>>,
}

impl<S, K, B, ReqB, ResB> Service<Request<ReqB>> for ContentBytes<S, K, B>
where
    S: Service<Request<RequestBytes<ReqB, B>>, Response = Response<ResB>> + Clone,
    K: KeyExtractor,
    B: Backend,
{
    type Response = Response<ResponseBytes<ResB, B>>;
    type Error = S::Error;
    type Future = ContentBytesFuture<S, ReqB, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let settings = &self.settings;
        let key = match self.key.extract(&RequestHead::from(&req)) {
            Ok(key) => key,
            Err(error) => {
                let response = response::key_error(StatusCode::BAD_REQUEST, &error);
                return ContentBytesFuture::respond(response);
            }
        };
        // Content-Length is a first reservation, never trusted alone: the
        // body is counted as it is read.
        let declared = if settings.requests {
            req.headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                .unwrap_or(0)
        } else {
            0
        };
        if declared > capacity(&settings.policy) {
            return ContentBytesFuture::respond(response::payload_too_large(&settings.policy));
        }
        // At most the capacity, so within u32.
        let reserved = declared as u32;
        let mut check = settings.backend.check(&key, &settings.policy, reserved);
        let pending = Pending {
            inner: &mut self.inner,
            req,
            key,
            reserved,
            settings: settings.clone(),
        };
        // Decided at once (the memory backend): called at once, with the
        // layer's own ready service.
        let state = match B::answer_now(&mut check) {
            Some(answer) => pending.answered(answer),
            None => State::Check {
                check,
                pending: Some(pending.parked()),
            },
        };
        ContentBytesFuture { state }
    }
}

/// The most bytes one request may ever pass: the smallest capacity of the
/// policy's limits.
fn capacity(policy: &Policy) -> u64 {
    policy
        .limits()
        .iter()
        .map(|l| u64::from(l.capacity()))
        .min()
        .unwrap_or(u64::MAX)
}

/// A request until its decision is acted on, with the service `I` it is
/// to be called with.
struct Pending<I, ReqB, B> {
    inner: I,
    req: Request<ReqB>,
    key: Key,
    reserved: u32,
    settings: Arc<Settings<B>>,
}

impl<I, ReqB, B> Pending<I, ReqB, B>
where
    I: Callee,
    I::Service: Service<Request<RequestBytes<ReqB, B>>>,
    B: Backend,
{
    /// The request, to wait with a service of its own.
    fn parked(self) -> Pending<Taken<I::Service>, ReqB, B> {
        Pending {
            inner: self.inner.take(),
            req: self.req,
            key: self.key,
            reserved: self.reserved,
            settings: self.settings,
        }
    }

    /// The call, or the limiter's answer, once the backend has answered.
    fn answered(self, answer: Result<Decision, BackendError>) -> State<I::Service, ReqB, B> {
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

/// What the request body and the future share: the latest decision, and
/// whether (and why) the body was cut off.
struct Shared {
    last: Option<Decision>,
    cut: Option<Cut>,
}

type SharedRef = Arc<Mutex<Shared>>;

fn lock(shared: &SharedRef) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Clone, Copy)]
enum Cut {
    /// Nothing more fits now: 429 (the denial is the shared `last`).
    Limited,
    /// The body is larger than the limit can ever hold: 413.
    TooLarge,
    /// The backend failed and the layer fails closed: 503.
    Failed,
}

pin_project! {
    /// The future of a [`ContentBytes`] call.
    pub struct ContentBytesFuture<S, ReqB, B>
    where
        S: Service<Request<RequestBytes<ReqB, B>>>,
        B: Backend,
    {
        #[pin]
        state: State<S, ReqB, B>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqB, B>
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
struct After<B> {
    shared: SharedRef,
    key: Key,
    settings: Arc<Settings<B>>,
    method: Method,
    uri: Uri,
}

impl<S, ReqB, B> ContentBytesFuture<S, ReqB, B>
where
    S: Service<Request<RequestBytes<ReqB, B>>>,
    B: Backend,
{
    fn respond(response: Response<Bytes>) -> Self {
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
    fn answer<ResB>(self, mut response: Response<ResB>) -> Response<ResponseBytes<ResB, B>> {
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

/// The request body's account: what was granted, what was read, the grant
/// under way (with the frame it holds back).
struct Counting<B: Backend> {
    key: Key,
    settings: Arc<Settings<B>>,
    shared: SharedRef,
    granted: u64,
    read: u64,
    grant: Option<Grant<B>>,
    held: Option<Frame<Bytes>>,
}

/// A grant asked of the backend: `asked` bytes, `need` of them needed now.
struct Grant<B: Backend> {
    check: Pin<Box<B::Future>>,
    asked: u32,
    need: u64,
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

/// Runs `task` on the current tokio runtime, if there is one (without one,
/// the refund or charge is lost: the reservation stands).
fn spawn(task: impl Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(task);
    }
}

pin_project! {
    /// A request body whose bytes are counted as the handler reads them
    /// (see [`ContentBytesLayer`]).
    pub struct RequestBytes<Bd, B: Backend> {
        #[pin]
        inner: Bd,
        counting: Option<Counting<B>>,
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
struct Charge<B: Backend> {
    key: Key,
    settings: Arc<Settings<B>>,
    sent: u64,
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
        body: ResponseBody<Bd>,
        charge: Option<Charge<B>>,
    }
}

impl<Bd, B: Backend> ResponseBytes<Bd, B> {
    fn limiter(data: Bytes) -> Self {
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
