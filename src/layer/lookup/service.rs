//! The service: the tenant's policy put in the request's extensions.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Request;
use tower_service::Service;

use crate::key::{Key, KeyExtractor, RequestHead};
use crate::Policy;

use super::layer::{LookedUp, PolicyLookup};

/// The service of a [`PolicyLookup`].
pub struct LookupService<S, K, F> {
    pub(super) inner: S,
    pub(super) lookup: PolicyLookup<K, F>,
}

impl<S: Clone, K: Clone, F> Clone for LookupService<S, K, F> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            lookup: self.lookup.clone(),
        }
    }
}

impl<S, K, F> fmt::Debug for LookupService<S, K, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LookupService")
            .field("lookup", &self.lookup)
            .finish_non_exhaustive()
    }
}

impl<S, B, K, F, Fut, E> Service<Request<B>> for LookupService<S, K, F>
where
    S: Service<Request<B>> + Clone + Send + 'static,
    S::Future: Send,
    B: Send + 'static,
    K: KeyExtractor,
    F: Fn(Key) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<Policy>, E>> + Send + 'static,
    E: fmt::Display + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        // The ready inner service goes with this request; a clone stays.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let tenant = self.lookup.key.extract(&RequestHead::from(&req));
        let lookup = self.lookup.clone();
        Box::pin(async move {
            // A request without a tenant gets no policy from here: the
            // limiter's own rule for that applies (`on_no_policy`).
            if let Ok(tenant) = tenant {
                let policy = lookup.policy(tenant).await;
                req.extensions_mut().insert(LookedUp(policy));
            }
            inner.call(req).await
        })
    }
}
