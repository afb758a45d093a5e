//! `FairShared`: the service that asks the capacity before each call.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use tower_service::Service;

use super::config::Config;
use super::layer::FairShare;
use super::place::Place;
use crate::algorithm::fair_share::Verdict;
use crate::clock::micros::compact;
use crate::clock::Micros;
use crate::key::RequestHead;
use crate::layer::answer::body::ResponseBody;
use crate::layer::RefusedByLimit;

/// The service a [`FairShare`] wraps.
#[derive(Clone, Debug)]
pub struct FairShared<S> {
    pub(super) inner: S,
    pub(super) share: FairShare,
}

/// The future of a [`FairShared`] call.
pub type FairShareFuture<ResB, E> =
    Pin<Box<dyn Future<Output = Result<Response<ResponseBody<ResB>>, E>> + Send>>;

impl<S, ReqB, ResB> Service<Request<ReqB>> for FairShared<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    ReqB: Send + 'static,
    ResB: 'static,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = S::Error;
    type Future = FairShareFuture<ResB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let config = self.share.config.clone();
        Box::pin(async move {
            let (verdict, place) = admitted(&config, &RequestHead::from(&req)).await;
            let window = config.capacity.window();
            let policy = policy_header(&config.name, verdict.share, window);
            if !verdict.admitted {
                let name = &config.name;
                return Ok(refused(
                    name,
                    policy,
                    verdict.share,
                    window,
                    verdict.retry_after,
                ));
            }
            let mut response = inner.call(req).await?;
            response.headers_mut().append("ratelimit-policy", policy);
            let held = place.map(|place| Box::new(place) as _);
            Ok(response.map(|b| ResponseBody::holding(b, held)))
        })
    }
}

/// The capacity's verdict on `req`, and its place if it holds one in
/// flight: at once, or with [`wait_up_to`](FairShare::wait_up_to), after
/// waiting until its tenant's share or the capacity admits it — asked
/// again each time (at once when a place in flight ends here), so a
/// waiting request holds no place and another tenant's waits never
/// lengthen it.
async fn admitted(config: &Arc<Config>, req: &RequestHead<'_>) -> (Verdict, Option<Place>) {
    let started = tokio::time::Instant::now();
    let mut waiting = None;
    loop {
        let (verdict, class, now, holding) = config.decide(req).await;
        let place = holding.map(|holding| Place::new(config.clone(), holding));
        let wait = std::time::Duration::from_micros(verdict.retry_after);
        let in_time = started.elapsed() + wait <= config.max_wait;
        if waiting.is_none() && !verdict.admitted && in_time {
            waiting = Waiting::join(&config.waiting, config.max_waiting);
        }
        if verdict.admitted || waiting.is_none() || !in_time {
            // Counted once, as it ended.
            config
                .observed
                .record(&config.name, class, &verdict, now, config.capacity.window());
            return (verdict, place);
        }
        // A place that ends here meanwhile wakes it; one ending elsewhere
        // (or between the decision and this line), the timer.
        let _ = tokio::time::timeout(wait, config.freed.notified()).await;
    }
}

/// A place among the requests waiting for the capacity, given back when
/// dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn join(waiting: &'a AtomicUsize, max: usize) -> Option<Self> {
        let joined = waiting.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        });
        joined.ok().map(|_| Self(waiting))
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `"<name>";q=<share>;w=<window in seconds>`, without `w` for a
/// capacity in flight.
fn policy_header(name: &str, share: u32, window_us: Option<u64>) -> HeaderValue {
    let text = match window_us {
        Some(window) => format!(
            "\"{name}\";q={share};w={}",
            window.div_ceil(1_000_000).max(1)
        ),
        None => format!("\"{name}\";q={share}"),
    };
    HeaderValue::try_from(text).unwrap_or_else(|_| HeaderValue::from_static("\"shared\""))
}

/// The answer to a request the capacity refused: the body every refusal
/// of this crate's limits has (`RateLimitLayer`'s JSON), its limit the
/// tenant's share, and the quota headers of that share — none left, more
/// after `Retry-After` — in both styles, so that a `RateLimitLayer` around
/// it (which leaves a refusal's headers alone) is not taken for the limit
/// that refused.
fn refused<B>(
    name: &str,
    policy: HeaderValue,
    share: u32,
    window_us: Option<u64>,
    retry_after_us: u64,
) -> Response<ResponseBody<B>> {
    let seconds = retry_after_us.div_ceil(1_000_000).max(1);
    let window = window_us.map_or_else(String::new, |window| {
        format!(r#""window":"{}","#, compact(Micros::new(window)))
    });
    let body = format!(
        r#"{{"error":"rate_limit_exceeded","limit":{share},{window}"retry_after_seconds":{seconds}}}"#
    );
    let mut response = Response::new(ResponseBody::limiter(Bytes::from(body)));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    response.extensions_mut().insert(RefusedByLimit);
    let headers = response.headers_mut();
    headers.insert(http::header::RETRY_AFTER, HeaderValue::from(seconds));
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert("ratelimit-policy", policy);
    let unix_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    headers.insert("x-ratelimit-limit", HeaderValue::from(share));
    headers.insert("x-ratelimit-remaining", HeaderValue::from(0));
    headers.insert("x-ratelimit-reset", HeaderValue::from(unix_now + seconds));
    if let Ok(field) = HeaderValue::try_from(format!("\"{name}\";r=0;t={seconds}")) {
        headers.insert("ratelimit", field);
    }
    response
}
