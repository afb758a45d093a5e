//! Settling a request by its response: count only what went wrong, or
//! charge what a request really cost once it is known.
//!
//! The layer checks (and counts) each request at its cost before the
//! handler runs, so a spent budget refuses requests *before* they run and
//! concurrent requests never overdraw it by more than they reserved. Once
//! the response is known, [`RateLimitLayer::settle`] says what the request
//! really cost, and the backend gives the difference back or charges it
//! ([`Backend::settle`](crate::backend::Backend::settle)); the response's
//! quota headers show the state after that.
//!
//! A request whose response never comes — the client went away, the
//! handler panicked — keeps what it reserved: it is counted at its
//! estimate. For counting failures only, that means it counts as one.
//!
//! [`RateLimitLayer::settle`]: crate::RateLimitLayer::settle

use std::fmt;
use std::sync::Arc;

use http::{Extensions, HeaderMap, Response, StatusCode};

/// What a settlement may read of a response.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct ResponseHead<'a> {
    /// The status.
    pub status: StatusCode,
    /// The headers (`x-tokens-used`, say).
    pub headers: &'a HeaderMap,
    /// The extensions, where a handler can leave its actual cost.
    pub extensions: &'a Extensions,
}

impl ResponseHead<'_> {
    /// Header `name` as a whole number, if it is one: the cost a handler
    /// reports (`x-tokens-used: 512`).
    ///
    /// ```
    /// use tower_ratelimit::layer::ResponseHead;
    /// let res = http::Response::builder().header("x-tokens-used", "512").body(()).unwrap();
    /// assert_eq!(ResponseHead::from(&res).number("x-tokens-used"), Some(512));
    /// assert_eq!(ResponseHead::from(&res).number("x-other"), None);
    /// ```
    pub fn number(&self, name: &str) -> Option<u32> {
        self.headers.get(name)?.to_str().ok()?.trim().parse().ok()
    }
}

impl<'a, B> From<&'a Response<B>> for ResponseHead<'a> {
    fn from(res: &'a Response<B>) -> Self {
        Self {
            status: res.status(),
            headers: res.headers(),
            extensions: res.extensions(),
        }
    }
}

type Rule = dyn Fn(&ResponseHead<'_>) -> Option<u32> + Send + Sync;

/// A layer's settlement: a request's actual cost from its response, or
/// `None` to keep what it reserved.
#[derive(Clone)]
pub(crate) struct Settlement(Arc<Rule>);

impl Settlement {
    pub(crate) fn new(
        rule: impl Fn(&ResponseHead<'_>) -> Option<u32> + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(rule))
    }

    /// The actual cost of a request that reserved `reserved`, if different.
    pub(crate) fn actual(&self, response: &ResponseHead<'_>, reserved: u32) -> Option<u32> {
        (self.0)(response).filter(|actual| *actual != reserved)
    }
}

impl fmt::Debug for Settlement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Settlement(..)")
    }
}
