//! The limits file: parsed and checked, watched and reloaded, shared by a
//! fleet on Redis (and across a failover), and the fleet example.

pub mod fleet;
#[cfg(all(feature = "redis", feature = "config"))]
mod fleet_example_test;
mod fleet_failover;
mod limits_file;
