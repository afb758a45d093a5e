//! A policy per tenant from a store of your own (a database, a claims
//! service): looked up asynchronously, kept in a bounded cache, and never
//! allowed to hold a request longer than a bound you set.
//!
//! [`PolicyLookup`] is the layer (its page has an example); its service is
//! [`LookupService`], which puts the policy it found in the request's
//! extensions as [`LookedUp`] for the rate limit to read.

mod cache;
mod layer;
mod service;

pub use layer::{LookedUp, PolicyLookup};
pub use service::LookupService;
