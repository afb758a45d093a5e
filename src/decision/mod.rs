//! What a policy says about one request, and where that came from.
//!
//! A [`Decision`](crate::Decision) (at the crate's root) holds one
//! [`Outcome`](crate::algorithm::Outcome) per limit, in the policy's order, and the [`Origin`] of the
//! answer. A [`Backend`](crate::backend::Backend) of your own builds
//! decisions from outcomes with
//! [`Decision::from_outcomes`](crate::Decision::from_outcomes); a
//! [`Limiter`](crate::Limiter) answers with an [`Admission`](crate::Admission); a handler reads
//! the [`Origin`] the layer put in the request's extensions.
//!
//! ```
//! use tower_ratelimit::algorithm::{Outcome, Verdict};
//! use tower_ratelimit::clock::Micros;
//!
//! let denied = Outcome::denied(10, 0, Micros::from_secs(60), Micros::from_secs(6));
//! assert_eq!(denied.verdict(), Verdict::RetryAfter(Micros::from_secs(6)));
//! ```

#[allow(clippy::module_inception)] // named after the type it holds
pub(crate) mod decision;
mod origin;

pub use decision::OutcomeCountMismatch;
pub use origin::Origin;
