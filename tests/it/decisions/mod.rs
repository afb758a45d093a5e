//! Decisions without a store's part: the algorithms against their
//! definitions and an independent reference model, quotas and calendars,
//! policies, keys, and properties over random traces.

mod algorithms;
mod calendar;
mod keys;
mod policy;
mod properties;
mod quota;
mod reference;
mod simulation;
