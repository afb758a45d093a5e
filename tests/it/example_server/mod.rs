//! The example server from outside: what a hostile client would try, the
//! guide's sessions replayed, its dashboard and alerts checked through
//! Prometheus.

mod alerts;
mod attacks;
mod dashboard;
mod hostile;
mod sessions;
