//! The cost of a request: how much of each limit it takes.

use std::fmt;

use crate::key::RequestHead;

/// How much of a limit one request takes.
pub trait Cost: Clone + Send + Sync + 'static {
    /// The cost of `req` (0 only peeks at the state).
    fn cost(&self, req: &RequestHead<'_>) -> u32;
}

impl Cost for u32 {
    fn cost(&self, _: &RequestHead<'_>) -> u32 {
        *self
    }
}

/// A closure as a cost.
///
/// ```
/// use tower_ratelimit::layer::cost_fn;
///
/// // One unit per started kilobyte of declared body, at least one.
/// let by_size = cost_fn(|req| {
///     let bytes: u64 = req.headers.get("content-length")
///         .and_then(|v| v.to_str().ok()?.parse().ok())
///         .unwrap_or(0);
///     u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX).max(1)
/// });
/// ```
pub fn cost_fn<F>(f: F) -> CostFn<F>
where
    F: Fn(&RequestHead<'_>) -> u32 + Clone + Send + Sync + 'static,
{
    CostFn(f)
}

/// A closure as a cost; see [`cost_fn`].
#[derive(Clone)]
pub struct CostFn<F>(F);

impl<F> fmt::Debug for CostFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CostFn")
    }
}

impl<F> Cost for CostFn<F>
where
    F: Fn(&RequestHead<'_>) -> u32 + Clone + Send + Sync + 'static,
{
    fn cost(&self, req: &RequestHead<'_>) -> u32 {
        (self.0)(req)
    }
}
