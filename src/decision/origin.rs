//! [`Origin`]: how a request was decided, by whom.

/// How a request was decided: which store answered, or why none was asked.
///
/// A [`Decision`](crate::Decision) carries the first five (who answered);
/// the layer puts one in the extensions of each request the inner service
/// gets (admitted, or let through) and of each response the limiter makes
/// itself (429, 503, 403), the others saying why no store decided.
///
/// ```
/// use tower_ratelimit::decision::Origin;
///
/// async fn handler(req: axum::extract::Request) -> &'static str {
///     match req.extensions().get::<Origin>() {
///         Some(Origin::Primary | Origin::Leased | Origin::Cached) => "limited by the store",
///         Some(Origin::Fallback | Origin::BreakerOpen) => "limited locally: the store is down",
///         Some(Origin::FailedOpen { .. }) => "not limited: the store is down",
///         _ => "not limited",
///     }
/// }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// The backend asked (memory, Redis, one of your own).
    #[default]
    Primary,
    /// A [`Fallback`](crate::backend::Fallback)'s second backend, because
    /// the first failed.
    Fallback,
    /// A [`Fallback`](crate::backend::Fallback)'s second backend, without
    /// asking the first: its [`Breaker`](crate::backend::Breaker) is open.
    BreakerOpen,
    /// A denial the backend made earlier, remembered until its retry-after
    /// instead of asking again (the Redis backend's denial cache,
    /// `RedisBackendBuilder::cache_denials`).
    Cached,
    /// An admission spent from this server's lease of the budget, without
    /// asking the store (`RedisBackendBuilder::leased`).
    Leased,
    /// No decision could be had, and the request was let through
    /// ([`OnBackendError::Allow`](crate::backend::OnBackendError::Allow)).
    FailedOpen {
        /// The backend was not asked: its breaker is open.
        breaker_open: bool,
    },
    /// No decision could be had, and the request was refused with 503
    /// ([`OnBackendError::Deny`](crate::backend::OnBackendError::Deny)).
    FailedClosed {
        /// The backend was not asked: its breaker is open.
        breaker_open: bool,
    },
    /// A policy in shadow mode would have refused the request; it was let
    /// through.
    Shadow,
    /// On an allow list: not limited, the backend not asked.
    AllowListed,
    /// On a deny list: refused with 403, the backend not asked.
    DenyListed,
}
