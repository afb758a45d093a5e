//! [`Origin`]: how a request was decided, by whom.

/// How a request was decided: which store answered, or why none was asked.
///
/// A [`Decision`](crate::Decision) carries the first five (who answered).
/// The layer marks the requests the inner service gets and the responses it
/// makes itself (429, 503, 403) with their `Origin` in their extensions,
/// **except the commonest: a request the store decided** ([`Primary`]).
/// `http::Extensions` boxes every value, and an empty map is allocated on
/// its first insert: marking every request would cost up to three
/// allocations each. So behind the layer, a request or refusal without a
/// mark was decided by the store; [`Origin::of`] reads it that way. Behind
/// several layers, the mark is the innermost one that is not the store's.
///
/// [`Primary`]: Origin::Primary
///
/// ```
/// use tower_ratelimit::decision::Origin;
///
/// async fn handler(req: axum::extract::Request) -> &'static str {
///     match Origin::of(req.extensions()) {
///         Origin::Primary | Origin::Leased | Origin::Cached => "limited by the store",
///         Origin::Fallback | Origin::BreakerOpen => "limited locally: the store is down",
///         Origin::FailedOpen { .. } => "not limited: the store is down",
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
    /// No policy matched the request, and it was let through unlimited
    /// ([`NoPolicy::Unlimited`](crate::layer::NoPolicy::Unlimited)).
    NoPolicy,
    /// No key could be extracted from the request, and it was let through
    /// unlimited ([`OnKeyError::Skip`](crate::layer::OnKeyError::Skip)).
    NoKey,
}

impl Origin {
    /// The origin the layer marked in a request's or a response's
    /// `extensions`: [`Primary`](Origin::Primary), the store, when there is
    /// no mark. Only meaningful behind the layer: anywhere else, no mark
    /// means the layer never saw the request.
    pub fn of(extensions: &http::Extensions) -> Origin {
        extensions.get().copied().unwrap_or_default()
    }
}
