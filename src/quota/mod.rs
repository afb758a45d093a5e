//! Quotas: how much, per how long. `rate.rs` holds [`Quota`](crate::Quota),
//! a validated rate and its text syntax (`10/s burst 20`); `calendar.rs`
//! the weeks, months and years a calendar quota's windows are.
//!
//! Below the algorithms and the policies, which both read quotas; the
//! public names are re-exported at the crate's root (`Quota`) and in
//! [`policy`](crate::policy).

pub(crate) mod calendar;
pub(crate) mod rate;

pub use calendar::{Calendar, Period};
pub use rate::{Quota, QuotaError, MAX_WINDOW, MIN_WINDOW};
