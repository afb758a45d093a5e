//! The backends: memory and Redis (standalone, Sentinel, TLS, a cluster),
//! batching, the breaker and the fallback, faults injected into a real
//! Redis, leases, bans, a store of your own.

mod backend_of_our_own;
mod batching;
mod breaker;
mod demotion;
mod distributed;
mod faults;
mod leases;
mod memory_backend;
mod redis_backend;
mod repair;
mod resharding;
mod sentinel;
mod state_store;
mod tls;
