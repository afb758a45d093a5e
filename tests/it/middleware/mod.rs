//! The layers as a service sees them: `RateLimitLayer` and its answers,
//! costs settled, shaping and soft shedding, adaptive limits and
//! concurrency, fair shares, tenant lookups, metrics, live changes, and
//! the `Limiter` for code that is not HTTP.

mod adaptive;
mod basic;
mod client;
mod concurrency;
mod content_bytes;
mod fair_flight;
mod fair_model;
mod fair_share;
mod http;
mod layer;
mod limiter;
mod live_changes;
mod lookup;
mod metrics;
mod operations;
mod peek;
mod serve;
mod settle;
mod shaping;
mod soft_shed;
mod stacked;
mod websocket;
