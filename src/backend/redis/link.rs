//! [`Link`]: what every call to Redis goes through, shared by the
//! backend's clones — the connection, the scripts it runs, the time a call
//! may take, and the health each call's end is reported to.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ::redis::{RedisError, Script, Value};

use super::batch::Call;
use super::connection::Connection;
use super::script::{KeyNames, Shape};
use super::{cause_of, KeyFormat};
use crate::backend::health::HealthTracker;
use crate::backend::{BackendError, Cause};

/// The connection and what each call on it needs.
#[derive(Clone)]
pub(super) struct Link {
    pub(super) conn: Connection,
    /// The script of each policy shape, made when first needed: one
    /// decision's, then a batch's.
    scripts: Arc<[OnceLock<Script>; 2 * Shape::COUNT]>,
    pub(super) names: KeyNames,
    pub(super) timeout: Duration,
    pub(super) health: Arc<HealthTracker>,
    /// Whether the server is known to run every command the key format's
    /// scripts make: always under the compact format; under the packed
    /// format once a probe was answered (by `connect`, or by the first
    /// call of a backend that connected lazily).
    runs_format: Arc<AtomicBool>,
}

impl Link {
    pub(super) fn new(
        conn: Connection,
        names: KeyNames,
        timeout: Duration,
        health: HealthTracker,
    ) -> Self {
        let runs_format = !matches!(names.format, KeyFormat::Packed { .. });
        Self {
            conn,
            scripts: Arc::new(std::array::from_fn(|_| OnceLock::new())),
            names,
            timeout,
            health: Arc::new(health),
            runs_format: Arc::new(AtomicBool::new(runs_format)),
        }
    }

    /// Whether the server runs what the key format's scripts need: under
    /// the packed format `PEXPIRE … GT` (Redis 7.0 or later), asked by
    /// `connect` and before every call until a server answers it (after
    /// `connect_lazy`, the first). On an older server every decision would
    /// fail with the script's own error, which names no command, and a
    /// layer that allows when no decision can be had would limit nothing.
    pub(super) async fn check_format(&self) -> Result<(), BackendError> {
        if self.runs_format.load(Ordering::Acquire) {
            return Ok(());
        }
        // A key no state takes: PEXPIRE of a missing key changes nothing.
        let mut probe = ::redis::cmd("PEXPIRE");
        probe
            .arg(format!("{}4:probe", self.names.prefix))
            .arg(1)
            .arg("GT");
        let refused = |e: RedisError| match cause_of(&e) {
            Cause::Other | Cause::UnknownCommand => BackendError::new(format!(
                "the packed key format needs `PEXPIRE … GT` (Redis 7.0 or later), \
                 which the server refused ({e}); KeyFormat::Compact needs no such command"
            ))
            .with_cause(Cause::UnknownCommand),
            _ => e.into(),
        };
        self.answered_as(self.conn.query::<i64>(&probe), refused)
            .await?;
        self.runs_format.store(true, Ordering::Release);
        Ok(())
    }

    /// The script of `shape`, made the first time it is needed.
    pub(super) fn script(&self, shape: Shape) -> &Script {
        self.scripts[shape.index()].get_or_init(|| Script::new(&shape.source()))
    }

    /// The script of a batch of `shape`, made the first time it is needed.
    pub(super) fn batch_script(&self, shape: Shape) -> &Script {
        self.scripts[Shape::COUNT + shape.index()]
            .get_or_init(|| Script::new(&shape.batch_source()))
    }

    /// One decision's call alone, on the shape's own script.
    pub(super) async fn send_alone(
        &self,
        shape: Shape,
        call: &Call,
    ) -> Result<Value, BackendError> {
        let script = self.script(shape);
        let cmd = call.alone(script.get_hash());
        self.answered(self.conn.run(script, &cmd)).await
    }

    /// How a call ended: told to the health tracker, and to a connection
    /// that follows a master.
    pub(super) fn report<T>(&self, result: &Result<T, BackendError>) {
        self.health.record(result);
        self.conn.followed(result);
    }

    /// `call`'s answer within the timeout, its failure given a cause, and
    /// how it went reported (health, and Sentinel's following).
    pub(super) async fn answered<T>(
        &self,
        call: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T, BackendError> {
        self.answered_as(call, BackendError::from).await
    }

    /// [`answered`](Self::answered), with Redis's errors told as `error`
    /// tells them.
    pub(super) async fn answered_as<T>(
        &self,
        call: impl Future<Output = Result<T, RedisError>>,
        error: impl FnOnce(RedisError) -> BackendError,
    ) -> Result<T, BackendError> {
        let answer = tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| self.timed_out())
            .and_then(|answer| answer.map_err(error));
        self.report(&answer);
        answer
    }

    pub(super) fn timed_out(&self) -> BackendError {
        BackendError::new(format!("no answer from Redis within {:?}", self.timeout))
            .with_cause(Cause::Timeout)
    }
}
