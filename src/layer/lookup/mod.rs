//! A policy per tenant from a store of your own (a database, a claims
//! service): looked up asynchronously, kept in a bounded cache, and never
//! allowed to hold a request longer than a bound you set.
//!
//! [`PolicyLookup`](crate::layer::PolicyLookup): the layer (`layer.rs`), its
//! cache of tenants (`cache.rs`), and its service (`service.rs`).

mod cache;
mod layer;
mod service;

pub use layer::{LookedUp, PolicyLookup};
pub use service::LookupService;
