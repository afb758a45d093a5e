//! Building policies: the builder, the errors that name what is wrong, the
//! limits of the syntax, and penalty boxes.
//!
//! The everyday types live at the crate's root: a [`Policy`](crate::Policy)
//! is a set of named [`Limit`](crate::Limit)s, all or nothing, each an
//! [`Algorithm`](crate::Algorithm) enforcing a [`Quota`](crate::Quota); a
//! [`Live`](crate::Live) handle replaces one at runtime. Here is what you
//! reach for when building them in code.
//!
//! ```
//! use std::time::Duration;
//! use tower_ratelimit::policy::PenaltyBox;
//! use tower_ratelimit::{Algorithm, Limit, Policy};
//!
//! let login = Policy::builder()
//!     .limit("attempts", Algorithm::SlidingLog, "5/15min".parse()?)
//!     .with(Limit::concurrent("in-flight", 2)?.lease(Duration::from_secs(30))?)
//!     .penalty(PenaltyBox::new(3, Duration::from_secs(600), Duration::from_secs(60))?)
//!     .build()?;
//! assert_eq!(login.limits().len(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod builder;
mod error;
pub(crate) mod limit;
pub(crate) mod live;
pub(crate) mod penalty;
#[allow(clippy::module_inception)] // named after the type it holds
pub(crate) mod policy;

pub use builder::PolicyBuilder;
pub use error::PolicyError;
pub use penalty::{PenaltyBox, PenaltyError};

/// The most limits one policy may hold. Decisions keep one outcome per
/// limit inline, without allocating.
pub const MAX_LIMITS: usize = 8;

/// The most entries a sliding log (or a limit of requests in flight) may
/// hold in one window, unless [`PolicyBuilder::max_log_entries`] raises it:
/// a log keeps one entry per admitted request, so a key of a
/// `4000000/h` log could hold millions. The sliding window counter keeps
/// 16 bytes whatever its limit.
pub const MAX_LOG_ENTRIES: u32 = 100_000;
