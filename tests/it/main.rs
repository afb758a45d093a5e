//! The integration tests, in one binary so a test run links once. (The
//! tracing test has a binary of its own: its subscriber must be the first to
//! see the log call sites.)

mod support;

#[allow(dead_code, unreachable_pub)]
#[path = "../../examples/server/main.rs"]
mod server;

#[path = "../../examples/basic.rs"]
mod basic_example;
#[allow(dead_code)]
#[path = "../../examples/client.rs"]
mod client_example;
mod decisions;
mod example_server;
#[cfg(all(feature = "redis", feature = "config"))]
#[allow(dead_code)]
#[path = "../../examples/fleet.rs"]
mod fleet_example;
mod house;
mod limits;
mod middleware;
#[allow(dead_code)]
#[path = "../../examples/simulate.rs"]
mod simulate;
mod store;
#[allow(dead_code)]
#[path = "../../examples/websocket.rs"]
mod websocket_example;
