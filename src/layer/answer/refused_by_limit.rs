//! `RefusedByLimit`: the mark on a response one of this crate's limits
//! refused, so that a limit in front can tell it from the application's
//! own answers.

/// In a response's extensions when a limit of this crate refused the
/// request (`RateLimitLayer`'s 429, a `FairShare` capacity's): a layer in
/// front that should not count what a layer behind it refused says so with
/// [`ResponseHead::refused_by_a_limit`](crate::layer::ResponseHead::refused_by_a_limit).
///
/// ```
/// use tower_ratelimit::key::Header;
/// use tower_ratelimit::{Policy, RateLimitLayer};
///
/// // 100 a minute per user, not counting what the capacity behind it
/// // refused: a refusal there spends nothing here.
/// let per_user = RateLimitLayer::new("100/min".parse::<Policy>().unwrap())
///     .key(Header::new("x-user-id"))
///     .count_if(|res| !res.refused_by_a_limit());
/// # drop(per_user);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RefusedByLimit;
