//! The integration tests, in one binary so a test run links once. (The
//! tracing test has a binary of its own: its subscriber must be the first to
//! see the log call sites.)

mod support;

#[allow(dead_code, unreachable_pub)]
#[path = "../../examples/server/main.rs"]
mod server;

mod adaptive;
mod alerts;
mod algorithms;
mod attacks;
mod backend_of_our_own;
mod basic;
#[path = "../../examples/basic.rs"]
mod basic_example;
mod batching;
mod breaker;
mod calendar;
mod client;
#[allow(dead_code)]
#[path = "../../examples/client.rs"]
mod client_example;
mod concurrency;
mod content_bytes;
mod dashboard;
mod demotion;
mod distributed;
mod fair_flight;
mod fair_model;
mod fair_share;
mod faults;
mod fleet;
#[cfg(all(feature = "redis", feature = "config"))]
#[allow(dead_code)]
#[path = "../../examples/fleet.rs"]
mod fleet_example;
#[cfg(all(feature = "redis", feature = "config"))]
mod fleet_example_test;
mod fleet_failover;
mod hostile;
mod house;
mod http;
mod keys;
mod layer;
mod leases;
mod limiter;
mod limits_file;
mod live_changes;
mod lookup;
mod memory_backend;
mod metrics;
mod operations;
mod policy;
mod properties;
mod quota;
mod redis_backend;
mod reference;
mod sentinel;
mod sessions;
mod settle;
mod shaping;
#[allow(dead_code)]
#[path = "../../examples/simulate.rs"]
mod simulate;
mod simulation;
mod soft_shed;
mod state_store;
mod tls;
mod websocket;
#[allow(dead_code)]
#[path = "../../examples/websocket.rs"]
mod websocket_example;
