//! Decisions in flight at the same moment, sent to Redis together: part of
//! a script call's Redis CPU is the call's, not the decision's, and one
//! call deciding many pays it once (BENCHMARKS.md gives the split).
//!
//! Decisions of one script [`Shape`] (and, on a cluster, of one slot) share
//! a [`Lane`]; `lanes.rs` decides which call each goes on. A decision that
//! finds its lane idle is sent at once, alone, as it would be without
//! batching: a quiet server waits for nothing. The decisions that arrive
//! while a call is in flight wait, and the next call takes them (up to
//! [`RedisBackendBuilder::max_batch`](super::RedisBackendBuilder::max_batch))
//! to one script call, `batch.lua` (`lean_batch.lua` for lean decisions:
//! each distinct argument list sent once), which decides them one after
//! another in the order they arrived, each exactly as its own call would.
//! A batch holds what arrived meanwhile: under load, batches grow with the
//! decisions in flight.
//!
//! Each decision keeps its own timeout from the moment it arrived; one
//! that gave up before its batch was sent is left out of it, so Redis
//! never counts a decision its caller stopped waiting for before it went.
//! A batch that fails fails each of its decisions (the layer then applies
//! its failure rule to each); a decision whose own script failed gets that
//! error alone.

mod call;
mod lanes;

use ::redis::{ErrorKind, ServerErrorKind, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;

pub(super) use self::call::{Call, MAX_BATCH};
use self::lanes::{Answer, CallId, Turn, Waiting};
pub(super) use self::lanes::{Batches, Lane};
use super::cause_in_script;
use std::sync::Arc;

use super::link::Link;
use super::script::Shape;
use crate::backend::{BackendError, Cause};

/// A call of a lane in flight, handed on when it ends or is dropped: the
/// decisions that came meanwhile go next, on a task of their own, so no
/// caller's future carries another's call.
struct Sending {
    link: Link,
    batches: Arc<Batches>,
    lane: Lane,
    /// The call in flight.
    id: CallId,
    /// The lane had nothing more to send: nothing to hand on.
    done: bool,
}

impl Sending {
    fn new(link: &Link, batches: &Arc<Batches>, lane: Lane, id: CallId) -> Self {
        Self {
            link: link.clone(),
            batches: Arc::clone(batches),
            lane,
            id,
            done: false,
        }
    }

    /// `batch` sent as call `id` by a task of its own, then what gathers
    /// meanwhile.
    fn spawn(link: &Link, batches: &Arc<Batches>, lane: Lane, batch: Vec<Waiting>, id: CallId) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(Sending::new(link, batches, lane, id).send(batch));
            }
            // No runtime to send on (it is shutting down): these decisions
            // fail, and so do any that follow, until the call is done.
            Err(_) => {
                drop(batch);
                let mut id = id;
                loop {
                    let (batch, next) = batches.next(lane, id);
                    if batch.is_empty() {
                        break;
                    }
                    id = next;
                }
            }
        }
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (batch, id) = self.batches.next(self.lane, self.id);
        if !batch.is_empty() {
            Sending::spawn(&self.link, &self.batches, self.lane, batch, id);
        }
    }
}

impl Sending {
    /// Send `batch`, and the ones that gather meanwhile, until the lane
    /// has nothing left.
    async fn send(mut self, mut batch: Vec<Waiting>) {
        loop {
            let answers = self
                .batches
                .send_batch(&self.link, self.lane.shape, batch.iter().map(|w| &w.call))
                .await;
            match answers {
                Ok(replies) if replies.len() == batch.len() => {
                    for (waiting, reply) in batch.drain(..).zip(replies) {
                        let _ = waiting.answer.send(own_answer(reply));
                    }
                }
                Ok(replies) => {
                    let error = BackendError::new(format!(
                        "Redis answered {} of a batch of {} decisions",
                        replies.len(),
                        batch.len()
                    ));
                    fail(batch.drain(..), &error);
                }
                Err(error) => fail(batch.drain(..), &error),
            }
            (batch, self.id) = self.batches.next(self.lane, self.id);
            if batch.is_empty() {
                self.done = true;
                return;
            }
        }
    }
}

/// A decision's part of a batch's reply: its reply, or (text in its
/// place) why its own script failed.
fn own_answer(reply: Value) -> Answer {
    match reply {
        Value::BulkString(text) => {
            let text = String::from_utf8_lossy(&text);
            let cause = cause_in_script(&text.to_ascii_lowercase()).unwrap_or(Cause::Other);
            Err(BackendError::new(format!("the script failed: {text}")).with_cause(cause))
        }
        reply => Ok(reply),
    }
}

/// The replies of a batch of lean decisions, laid out flat (lean_batch.lua):
/// each decision's three numbers as the reply of its own call, or the
/// text of its error in their place.
fn lean_replies(flat: Vec<Value>) -> Result<Vec<Value>, BackendError> {
    if !flat.len().is_multiple_of(3) {
        return Err(BackendError::new(format!(
            "a batch of lean decisions answered with {} numbers, not three a decision",
            flat.len()
        )));
    }
    let mut replies = Vec::with_capacity(flat.len() / 3);
    let mut flat = flat.into_iter();
    while let (Some(first), Some(free), Some(reset)) = (flat.next(), flat.next(), flat.next()) {
        replies.push(match first {
            text @ Value::BulkString(_) => text,
            first => Value::Array(vec![first, free, reset]),
        });
    }
    Ok(replies)
}

/// Each decision of a failed batch fails with its error.
fn fail(batch: impl Iterator<Item = Waiting>, error: &BackendError) {
    for waiting in batch {
        let own = BackendError::new(error.to_string()).with_cause(error.cause());
        let _ = waiting.answer.send(Err(own));
    }
}

impl Batches {
    /// A batch's calls, in one call of the shape's batch script (or of its
    /// own, for one): each decision's reply, in order.
    async fn send_batch<'a>(
        &self,
        link: &Link,
        shape: Shape,
        calls: impl ExactSizeIterator<Item = &'a Call> + Clone,
    ) -> Result<Vec<Value>, BackendError> {
        let mut first = calls.clone();
        if let (Some(call), None) = (first.next(), first.next()) {
            return Ok(vec![link.send_alone(shape, call).await?]);
        }
        let script = link.batch_script(shape);
        let whole = match self.first_sent(shape) {
            true => Some(shape.batch_source()),
            false => None,
        };
        let call = async {
            if let Some(source) = &whole {
                let eval = Call::together((script.get_hash(), Some(source)), shape, calls.clone());
                match link.conn.query::<Value>(&eval).await {
                    // A user held to EVALSHA and SCRIPT LOAD (the guide's
                    // ACL) loads it instead.
                    Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) => {}
                    reply => return reply,
                }
            }
            let cmd = Call::together((script.get_hash(), None), shape, calls);
            link.conn.run(script, &cmd).await
        };
        match link.answered(call).await? {
            Value::Array(replies) if shape.is_lean() => lean_replies(replies),
            Value::Array(replies) => Ok(replies),
            other => Err(BackendError::new(format!(
                "unexpected reply to a batch: {other:?}"
            ))),
        }
    }

    /// One decision's reply, batched with the others of its lane.
    pub(super) async fn send(
        self: &Arc<Self>,
        link: &Link,
        lane: Lane,
        call: Call,
    ) -> Result<Value, BackendError> {
        let deadline = Instant::now() + link.timeout;
        let (mut answer, flush) = match self.join(lane, call) {
            Turn::Lead(call, id) => {
                let _sending = Sending::new(link, self, lane, id);
                return link.send_alone(lane.shape, &call).await;
            }
            Turn::Wait { answer, flush } => (answer, flush),
            Turn::Second { answer, batch, id } => {
                Sending::spawn(link, self, lane, batch, id);
                (answer, None)
            }
        };
        if let Some((at, taken)) = flush {
            if let Ok(answer) = tokio::time::timeout_at(at.min(deadline), &mut answer).await {
                return waited(answer);
            }
            let (batch, id) = self.flush(lane, taken);
            if !batch.is_empty() {
                Sending::spawn(link, self, lane, batch, id);
            }
        }
        match tokio::time::timeout_at(deadline, answer).await {
            Ok(answer) => waited(answer),
            Err(_) => {
                let answer = Err(link.timed_out());
                link.report(&answer);
                answer
            }
        }
    }
}

/// What a waiting decision was told.
fn waited(answer: Result<Answer, oneshot::error::RecvError>) -> Answer {
    answer.unwrap_or_else(|_| {
        Err(BackendError::new(
            "the batch of this decision ended unanswered",
        ))
    })
}
