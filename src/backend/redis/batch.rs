//! Decisions in flight at the same moment, sent to Redis together: part of
//! a script call's Redis CPU is the call's, not the decision's, and one
//! call deciding many pays it once (BENCHMARKS.md gives the split).
//!
//! Decisions of one script [`Shape`] (and, on a cluster, of one slot) share
//! a [`Lane`]. A decision that finds its lane idle is sent at once, alone,
//! as it would be without batching: a quiet server waits for nothing.
//! While a call is in flight, the decisions that arrive wait in the lane,
//! and when it ends the next call takes them all (up to
//! [`RedisBackendBuilder::max_batch`](super::RedisBackendBuilder::max_batch))
//! to one script call, `batch.lua` (`lean_batch.lua` for lean decisions:
//! each distinct argument list sent once), which decides them one after
//! another in the order they arrived, each exactly as its own call would. A
//! lane has one call in flight, or two once a quarter of a batch waits
//! beside the first (`max_batch / 4`, at least 2): Redis then finds the
//! next call ready instead of idling while the client reads the answers
//! and sends again (at 32 callers the decisions a second about doubled).
//! A call that ends beside another sends what waits only once as many
//! wait, so no call goes nearly empty. A batch holds what arrived
//! meanwhile: under load, batches grow with the decisions in flight. Only a call out longer than a fifth of the timeout
//! (a far or stalled Redis) has the waiting decisions sent beside those,
//! so that none waits past that for a call to end.
//!
//! Each decision keeps its own timeout from the moment it arrived; one
//! that gave up before its batch was sent is left out of it, so Redis
//! never counts a decision its caller stopped waiting for before it went.
//! A batch that fails fails each of its decisions (the layer then applies
//! its failure rule to each); a decision whose own script failed gets that
//! error alone.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use ::redis::{Cmd, ErrorKind, ServerErrorKind, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::script::{Shape, Words};
use super::RedisBackend;
use crate::backend::BackendError;
use crate::key::Key;

/// The decisions that may share a script call: one shape's, and on a
/// cluster one slot's (a call's keys never cross slots).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Lane {
    pub(super) shape: Shape,
    pub(super) slot: u16,
}

/// The most decisions a call holds (`max_batch`'s bound): a lean batch
/// names each decision's argument list in a byte.
pub(super) const MAX_BATCH: usize = 256;

/// How many of a lean batch's last distinct argument lists a decision's is
/// looked for among (`Call::together`).
const RECENT_LISTS: usize = 8;

/// One decision's keys and arguments, as `invocation` writes them: the
/// number of keys first, then each word, kept in one buffer.
#[derive(Default)]
pub(super) struct Call {
    keys: Option<usize>,
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Call {
    fn words(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(a, &b)| &self.bytes[a..b])
    }

    fn key_count(&self) -> usize {
        self.keys.unwrap_or(0)
    }

    /// `EVALSHA <sha>` of this call alone (the shape's own script).
    pub(super) fn alone(&self, sha: &str) -> Cmd {
        let mut cmd = Cmd::with_capacity(self.ends.len() + 3, self.bytes.len() + 64);
        cmd.arg("EVALSHA").arg(sha).arg(self.key_count());
        for word in self.words() {
            cmd.arg(word);
        }
        cmd
    }

    /// The shape's batch script deciding `calls` in order: `EVALSHA
    /// <sha>`, or `EVAL <script>` (`script` given), then every key, the
    /// number of calls, and for a lean shape (`lean_batch.lua`) the
    /// number of distinct argument lists, those lists, then (when there
    /// are several) a word of each call's list, a byte each, and each
    /// call's own words; else (`batch.lua`) each call's numbers of
    /// keys and arguments, then every argument.
    fn together<'a>(
        (sha, script): (&str, Option<&str>),
        shape: Shape,
        calls: impl Iterator<Item = &'a Call> + Clone,
    ) -> Cmd {
        let (keys, words) = calls
            .clone()
            .fold((0, 0), |(k, w), c| (k + c.key_count(), w + c.ends.len()));
        let mut cmd = Cmd::with_capacity(words + 8, 64 + words * 16);
        match script {
            Some(script) => cmd.arg("EVAL").arg(script),
            None => cmd.arg("EVALSHA").arg(sha),
        };
        cmd.arg(keys);
        for call in calls.clone() {
            call.words().take(call.key_count()).for_each(|k| {
                cmd.arg(k);
            });
        }
        cmd.arg(calls.clone().count());
        // A lean shape fixes its calls' counts (`invocation` writes what
        // it fixes: a unit test in shape.rs holds them together).
        if let Some((shared, _)) = shape.lean_list() {
            let list = |call: &'a Call| call.words().skip(call.key_count()).take(shared);
            let mut lists: Vec<&Call> = Vec::new();
            // Each decision's list in a byte (a batch holds at most
            // MAX_BATCH = 256 decisions, so at most 256 lists).
            let mut chosen: Vec<u8> = Vec::new();
            for call in calls.clone() {
                // Against the last few lists only: a policy's decisions
                // share one, and costs that vary (bytes, tokens) cost each
                // decision a few comparisons, not one per list.
                let recent = lists.len().saturating_sub(RECENT_LISTS)..lists.len();
                let known = recent.into_iter().find(|&j| list(lists[j]).eq(list(call)));
                let j = known.unwrap_or_else(|| {
                    lists.push(call);
                    lists.len() - 1
                });
                chosen.push(u8::try_from(j).unwrap_or(u8::MAX));
            }
            cmd.arg(lists.len());
            for call in &lists {
                list(call).for_each(|word| {
                    cmd.arg(word);
                });
            }
            // Named only when there is more than one.
            if lists.len() > 1 {
                cmd.arg(chosen);
            }
            for call in calls {
                call.words()
                    .skip(call.key_count() + shared)
                    .for_each(|word| {
                        cmd.arg(word);
                    });
            }
            return cmd;
        }
        for call in calls.clone() {
            cmd.arg(call.key_count())
                .arg(call.ends.len().saturating_sub(call.key_count()));
        }
        for call in calls {
            call.words().skip(call.key_count()).for_each(|a| {
                cmd.arg(a);
            });
        }
        cmd
    }
}

impl Words for Call {
    fn word(&mut self, word: &[u8]) {
        self.bytes.extend_from_slice(word);
        self.ends.push(self.bytes.len());
    }

    fn number(&mut self, n: i64) {
        // The first number is how many keys follow.
        if self.keys.is_none() {
            self.keys = Some(usize::try_from(n).unwrap_or(0));
            return;
        }
        let _ = write!(self.bytes, "{n}");
        self.ends.push(self.bytes.len());
    }
}

/// A decision's answer from its batch: its own reply, or why none came.
type Answer = Result<Value, BackendError>;

/// A decision waiting in its lane.
struct Waiting {
    call: Call,
    answer: oneshot::Sender<Answer>,
}

#[derive(Default)]
struct LaneState {
    waiting: VecDeque<Waiting>,
    /// Calls of the lane in flight: when one ends, its sender sends what
    /// waits.
    calls: usize,
    /// When the lane last sent a call.
    last_sent: Option<Instant>,
    /// How many times waiting decisions were taken: a flush due for those
    /// already taken does nothing.
    taken: u64,
    /// Whether a waiting decision will send the others if no call ends
    /// first.
    flush_due: bool,
}

impl LaneState {
    /// The decisions whose callers still wait, in the order they came, up
    /// to `max` of them and `max` keys between them (at least one
    /// decision): a call's work stays near `max` states read and written,
    /// however many limits a policy has.
    fn take(&mut self, max: usize) -> Vec<Waiting> {
        let mut batch = Vec::with_capacity(self.waiting.len().min(max));
        let mut keys = 0;
        while let Some(waiting) = self.waiting.pop_front() {
            if waiting.answer.is_closed() {
                continue;
            }
            keys += waiting.call.key_count();
            if !batch.is_empty() && keys > max {
                self.waiting.push_front(waiting);
                break;
            }
            batch.push(waiting);
            if batch.len() == max {
                break;
            }
        }
        if !batch.is_empty() {
            self.taken += 1;
            self.flush_due = false;
            self.last_sent = Some(Instant::now());
        }
        batch
    }
}

/// The lanes of one backend (shared by its clones).
pub(super) struct Batches {
    max: usize,
    /// The longest a decision waits for a call in flight to end before it
    /// is sent anyway (a fifth of the timeout): a far or slow Redis is
    /// then asked by several calls at once.
    max_wait: Duration,
    lanes: Mutex<HashMap<Lane, LaneState>>,
    /// Whether this backend sent each shape's batch script yet.
    sent: [AtomicBool; Shape::COUNT],
}

/// What a decision does on joining its lane.
enum Turn {
    /// Nothing in flight: send it now, alone, then hand the lane on.
    Lead(Call),
    /// A call is in flight: wait for the batch after it, and if `flush`,
    /// send the waiting ones at that instant if no call ended before.
    Wait {
        answer: oneshot::Receiver<Answer>,
        flush: Option<(Instant, u64)>,
    },
    /// A quarter of a batch waits beside the call in flight: send `batch`
    /// (this decision among them) now on a second call, then wait.
    Second {
        answer: oneshot::Receiver<Answer>,
        batch: Vec<Waiting>,
    },
}

impl Batches {
    pub(super) fn new(max: usize, max_wait: Duration) -> Self {
        Self {
            max: max.min(MAX_BATCH),
            max_wait,
            lanes: Mutex::new(HashMap::new()),
            sent: std::array::from_fn(|_| AtomicBool::new(false)),
        }
    }

    /// Whether the batch script of `shape` is sent for the first time: then
    /// as a whole (EVAL, one round trip, and Redis keeps it), not by its
    /// hash (EVALSHA, refused, then loaded and sent again: three round
    /// trips, past a far Redis's timeout), unless the user may not EVAL.
    fn first_sent(&self, shape: Shape) -> bool {
        !self.sent[shape.index()].swap(true, Ordering::Relaxed)
    }

    fn join(&self, lane: Lane, call: Call) -> Turn {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        let state = lanes.entry(lane).or_default();
        let now = Instant::now();
        if state.calls == 0 {
            state.calls = 1;
            state.last_sent = Some(now);
            return Turn::Lead(call);
        }
        let (answer, receiver) = oneshot::channel();
        state.waiting.push_back(Waiting { call, answer });
        // A second call beside the first once a quarter of a batch waits:
        // no smaller, so that the calls stay full under load.
        if state.calls == 1 && state.waiting.len() >= self.second_call() {
            // (It holds this decision, whose answer is awaited.)
            let batch = state.take(self.max);
            if !batch.is_empty() {
                state.calls += 1;
                return Turn::Second {
                    answer: receiver,
                    batch,
                };
            }
        }
        let flush = (!state.flush_due).then(|| {
            state.flush_due = true;
            (state.last_sent.unwrap_or(now) + self.max_wait, state.taken)
        });
        Turn::Wait {
            answer: receiver,
            flush,
        }
    }

    /// How many decisions wait before a second call goes beside the one
    /// in flight: a quarter of a batch, at least 2.
    fn second_call(&self) -> usize {
        (self.max / 4).max(2)
    }

    /// A call of the lane ended: the next batch it sends. Empty when none
    /// wait, or while another call is in flight fewer than a second call's
    /// worth: the call's sender stops (and an idle lane is forgotten), and
    /// the call in flight takes them when it ends, unless enough gather to
    /// send a second call first. So no call goes nearly empty beside
    /// another, each paying Redis the cost of a call.
    fn next(&self, lane: Lane) -> Vec<Waiting> {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(state) = lanes.get_mut(&lane) else {
            return Vec::new();
        };
        let batch = match state.calls > 1 && state.waiting.len() < self.second_call() {
            true => Vec::new(),
            false => state.take(self.max),
        };
        if batch.is_empty() {
            state.calls = state.calls.saturating_sub(1);
            if state.calls == 0 {
                lanes.remove(&lane);
            }
        }
        batch
    }

    /// The waiting decisions, to send now on a call of their own, unless
    /// they were taken since `taken`.
    fn flush(&self, lane: Lane, taken: u64) -> Vec<Waiting> {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(state) = lanes.get_mut(&lane).filter(|s| s.taken == taken) else {
            return Vec::new();
        };
        let batch = state.take(self.max);
        if !batch.is_empty() {
            state.calls += 1;
        }
        batch
    }
}

/// A call of a lane in flight, handed on when it ends or is dropped: the
/// decisions that came meanwhile go next, on a task of their own, so no
/// caller's future carries another's call.
struct Sending {
    backend: RedisBackend,
    lane: Lane,
    /// The lane had nothing more to send: nothing to hand on.
    done: bool,
}

impl Sending {
    fn new(backend: &RedisBackend, lane: Lane) -> Self {
        Self {
            backend: backend.clone(),
            lane,
            done: false,
        }
    }

    /// `batch` sent by a task of its own, then what gathers meanwhile.
    fn spawn(backend: &RedisBackend, lane: Lane, batch: Vec<Waiting>) {
        let Some(batches) = &backend.batches else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(Sending::new(backend, lane).send(batch));
            }
            // No runtime to send on (it is shutting down): these decisions
            // fail, and so do any that follow, until the call is done.
            Err(_) => {
                drop(batch);
                while !batches.next(lane).is_empty() {}
            }
        }
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        let Some(batches) = self.backend.batches.as_ref().filter(|_| !self.done) else {
            return;
        };
        let batch = batches.next(self.lane);
        if !batch.is_empty() {
            Sending::spawn(&self.backend, self.lane, batch);
        }
    }
}

impl Sending {
    /// Send `batch`, and the ones that gather meanwhile, until the lane
    /// has nothing left.
    async fn send(mut self, mut batch: Vec<Waiting>) {
        let backend = self.backend.clone();
        loop {
            let answers = backend
                .send_batch(self.lane.shape, batch.iter().map(|w| &w.call))
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
            let Some(batches) = &backend.batches else {
                return;
            };
            batch = batches.next(self.lane);
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
        Value::BulkString(text) => Err(BackendError::new(format!(
            "the script failed: {}",
            String::from_utf8_lossy(&text)
        ))),
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

impl RedisBackend {
    /// The lane of a decision of `shape` on `key`.
    pub(super) fn lane(&self, shape: Shape, key: &Key) -> Lane {
        #[cfg(feature = "redis-cluster")]
        if self.nodes.is_some() {
            let slot = super::script::key_slot(&self.names, key);
            return Lane { shape, slot };
        }
        let _ = key;
        Lane { shape, slot: 0 }
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

    /// A batch's calls, in one call of the shape's batch script (or of its
    /// own, for one): each decision's reply, in order.
    async fn send_batch<'a>(
        &self,
        shape: Shape,
        calls: impl ExactSizeIterator<Item = &'a Call> + Clone,
    ) -> Result<Vec<Value>, BackendError> {
        let mut first = calls.clone();
        if let (Some(call), None) = (first.next(), first.next()) {
            return Ok(vec![self.send_alone(shape, call).await?]);
        }
        let script = self.batch_script(shape);
        let whole = match self.batches.as_ref().is_some_and(|b| b.first_sent(shape)) {
            true => Some(shape.batch_source()),
            false => None,
        };
        let call = async {
            if let Some(source) = &whole {
                let eval = Call::together((script.get_hash(), Some(source)), shape, calls.clone());
                match self.conn.query::<Value>(&eval).await {
                    // A user held to EVALSHA and SCRIPT LOAD (the guide's
                    // ACL) loads it instead.
                    Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) => {}
                    reply => return reply,
                }
            }
            let cmd = Call::together((script.get_hash(), None), shape, calls);
            self.conn.run(script, &cmd).await
        };
        match self.answered(call).await? {
            Value::Array(replies) if shape.is_lean() => lean_replies(replies),
            Value::Array(replies) => Ok(replies),
            other => Err(BackendError::new(format!(
                "unexpected reply to a batch: {other:?}"
            ))),
        }
    }

    /// One decision's reply, batched with the others of its lane.
    pub(super) async fn batched(
        &self,
        batches: &Batches,
        lane: Lane,
        call: Call,
    ) -> Result<Value, BackendError> {
        let deadline = Instant::now() + self.timeout;
        let (mut answer, flush) = match batches.join(lane, call) {
            Turn::Lead(call) => {
                let _sending = Sending::new(self, lane);
                return self.send_alone(lane.shape, &call).await;
            }
            Turn::Wait { answer, flush } => (answer, flush),
            Turn::Second { answer, batch } => {
                Sending::spawn(self, lane, batch);
                (answer, None)
            }
        };
        if let Some((at, taken)) = flush {
            if let Ok(answer) = tokio::time::timeout_at(at.min(deadline), &mut answer).await {
                return self.waited(answer);
            }
            let batch = batches.flush(lane, taken);
            if !batch.is_empty() {
                Sending::spawn(self, lane, batch);
            }
        }
        match tokio::time::timeout_at(deadline, answer).await {
            Ok(answer) => self.waited(answer),
            Err(_) => {
                let answer = Err(self.timed_out());
                self.report(&answer);
                answer
            }
        }
    }

    /// What a waiting decision was told.
    fn waited(&self, answer: Result<Answer, oneshot::error::RecvError>) -> Answer {
        answer.unwrap_or_else(|_| {
            Err(BackendError::new(
                "the batch of this decision ended unanswered",
            ))
        })
    }
}
