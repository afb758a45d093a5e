//! Client-side throttling: [`ThrottleLayer`] makes a client wait for its
//! turn instead of being refused.
//!
//! It wraps any `Service<http::Request<B>>` — a hyper-util client, a
//! reqwest-like tower stack — and, before each request:
//!
//! * waits until the request fits the client's own policy, if it has one
//!   ([`ThrottleLayer::policy`]), counted per server (URI authority);
//! * waits as the server asked: after a 429 or 503, its `Retry-After`; and
//!   whenever the server's quota headers (`RateLimit`, or
//!   `X-RateLimit-Remaining` with `X-RateLimit-Reset`) say nothing is left,
//!   until its limit is whole again. Requests sent since the last response
//!   are counted against what it said was left, so several at once do not
//!   overrun it.
//!
//! A wait longer than the maximum ([`ThrottleLayer::max_wait`], default 30
//! seconds) fails at once with [`ThrottleError::WouldWait`], saying how long
//! it would have been. So a client that knows nothing of a server's quota
//! gets no 429 from a server that sends quota headers, and from one that
//! sends only `Retry-After`, one: the first refusal teaches it how many the
//! server admitted in how long (up to when it may send again), and it keeps
//! to that rate from then on.
//!
//! ```
//! use std::time::Duration;
//! use tower::ServiceBuilder;
//! use tower_ratelimit::client::ThrottleLayer;
//! use tower_ratelimit::Policy;
//!
//! # fn wrap<S>(http_client: S) -> impl Sized where S: Clone {
//! let client = ServiceBuilder::new()
//!     .layer(ThrottleLayer::new().policy("10/s".parse::<Policy>().unwrap()).max_wait(Duration::from_secs(5)))
//!     .service(http_client);
//! # client }
//! ```

mod hints;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use crate::key::Key;
use crate::Admission;
use crate::{Limiter, Policy};

/// Makes a client wait for its turn; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct ThrottleLayer {
    own: Option<Limiter>,
    max_wait: Duration,
}

impl Default for ThrottleLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl ThrottleLayer {
    /// Pace by what servers say; wait at most 30 seconds.
    pub fn new() -> Self {
        Self {
            own: None,
            max_wait: Duration::from_secs(30),
        }
    }

    /// Also keep to `policy` of our own, per server.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.own = Some(Limiter::new(policy));
        self
    }

    /// Fail a request rather than wait longer than `max_wait`.
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Throttle {
            inner,
            shared: Arc::new(Shared {
                own: self.own.clone(),
                max_wait: self.max_wait,
                servers: Mutex::default(),
            }),
        }
    }
}

/// A client service that waits for its turn. Made by [`ThrottleLayer`].
#[derive(Clone, Debug)]
pub struct Throttle<S> {
    inner: S,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    own: Option<Limiter>,
    max_wait: Duration,
    /// What each server said, by authority. At most `MAX_SERVERS`.
    servers: Mutex<HashMap<String, Pace>>,
}

/// What a server said, and what was sent since.
#[derive(Clone, Copy, Debug)]
struct Pace {
    /// Send nothing before this.
    not_before: Instant,
    /// Left of its tightest limit, counting requests sent since, and when
    /// that limit is whole again.
    remaining: Option<(u64, Instant)>,
    /// For a server that sends no quota headers: what its first refusal
    /// taught — this many admitted per this long — kept to from then on.
    learned: Option<(u64, Duration)>,
    /// Requests it admitted since `counting_from`.
    admitted: u64,
    counting_from: Instant,
}

impl Shared {
    /// Servers remembered; beyond, the one whose hints matter least makes way.
    const MAX_SERVERS: usize = 1_024;

    fn servers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pace>> {
        self.servers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Take a turn at `server`: `Ok(None)` to go now, `Ok(Some(wait))` to
    /// go after `wait` (the turn is taken), or how long it would be.
    fn turn(&self, server: &str, now: Instant) -> Result<Option<Duration>, Duration> {
        let mut servers = self.servers();
        let Some(pace) = servers.get_mut(server) else {
            return Ok(None);
        };
        // Worked out on a copy: a turn given up leaves nothing taken.
        let mut next = *pace;
        let mut go_at = next.not_before.max(now);
        // A budget whose limit is whole again starts over: what the server
        // will say next, or what it taught.
        let learned = |from: Instant| next.learned.map(|(n, period)| (n, from + period));
        if next.remaining.is_none_or(|(_, whole_at)| whole_at <= go_at) {
            next.remaining = learned(go_at);
        }
        if let Some((0, whole_at)) = next.remaining {
            go_at = whole_at;
            next.remaining = learned(whole_at);
        }
        if let Some((left, _)) = &mut next.remaining {
            *left = left.saturating_sub(1);
        }
        let wait = go_at - now;
        if wait > self.max_wait {
            return Err(wait);
        }
        next.not_before = go_at;
        *pace = next;
        Ok((!wait.is_zero()).then_some(wait))
    }

    /// Remember what a response from `server` said.
    fn heard(&self, server: String, hint: hints::Hint, now: Instant) {
        let mut servers = self.servers();
        if servers.len() >= Self::MAX_SERVERS && !servers.contains_key(&server) {
            servers.retain(|_, p| p.not_before > now);
            if servers.len() >= Self::MAX_SERVERS {
                return;
            }
        }
        let pace = servers.entry(server).or_insert(Pace {
            not_before: now,
            remaining: None,
            learned: None,
            admitted: 0,
            counting_from: now,
        });
        match hint.pause {
            None => pace.admitted += 1,
            Some(pause) => {
                let resume = now + pause;
                pace.not_before = pace.not_before.max(resume);
                if hint.remaining.is_none() && pace.learned.is_none() {
                    // Admitted so many in the span that ends when it may
                    // send again: keep to that rate, with an eighth more
                    // time for the trip to the server (its window opens
                    // when a request arrives, not when it leaves).
                    let span = resume
                        .saturating_duration_since(pace.counting_from)
                        .max(pause);
                    pace.learned = Some((pace.admitted.max(1), span + span / 8));
                    pace.remaining = None;
                }
                pace.admitted = 0;
                pace.counting_from = resume;
            }
        }
        if let Some((left, reset)) = hint.remaining {
            pace.remaining = Some((left, now + reset));
        }
    }
}

/// Why a throttled request failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ThrottleError<E> {
    /// Its turn would come after more than the maximum wait.
    WouldWait {
        /// How long it would have waited.
        wait: Duration,
    },
    /// The wrapped service failed.
    Inner(E),
}

impl<E: fmt::Display> fmt::Display for ThrottleError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WouldWait { wait } => write!(
                f,
                "rate limited: the request's turn is {:.1} s away, more than the maximum wait",
                wait.as_secs_f64()
            ),
            Self::Inner(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for ThrottleError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::WouldWait { .. } => None,
            Self::Inner(e) => Some(e),
        }
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for Throttle<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqB: Send + 'static,
{
    type Response = Response<ResB>;
    type Error = ThrottleError<S::Error>;
    // Boxed: a throttled request goes over the network next, beside which
    // one allocation is nothing.
    type Future = Pin<Box<dyn Future<Output = Result<Response<ResB>, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(ThrottleError::Inner)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        let server = req
            .uri()
            .authority()
            .map_or_else(String::new, |a| a.as_str().to_owned());
        Box::pin(async move {
            if let Some(own) = &shared.own {
                let key = Key::new("authority", &server);
                match own.until_ready(&key, 1, shared.max_wait).await {
                    Admission::Denied(decision) => {
                        let wait = decision.retry_after().unwrap_or(Duration::MAX);
                        return Err(ThrottleError::WouldWait { wait });
                    }
                    Admission::Allowed(_) | Admission::Unavailable { .. } => {}
                }
            }
            match shared.turn(&server, Instant::now()) {
                Ok(None) => {}
                Ok(Some(wait)) => tokio::time::sleep(wait).await,
                Err(wait) => return Err(ThrottleError::WouldWait { wait }),
            }
            let response = inner.call(req).await.map_err(ThrottleError::Inner)?;
            let hint = hints::read(response.status(), response.headers());
            shared.heard(server, hint, Instant::now());
            Ok(response)
        })
    }
}
