//! Quotas: how much, per how long. `quota.rs` holds [`Quota`](crate::Quota),
//! a validated rate and its text syntax (`10/s burst 20`); `calendar.rs`
//! the weeks, months and years a calendar quota's windows are.
//!
//! Below the algorithms and the policies, which both read quotas. `Quota`
//! itself is at the crate's root; its error, its bounds and the calendar's
//! periods are here.

pub(crate) mod calendar;
#[allow(clippy::module_inception)] // named after the type it holds
pub(crate) mod quota;

pub use calendar::{Calendar, Period};
pub use quota::{QuotaError, MAX_WINDOW, MIN_WINDOW};
