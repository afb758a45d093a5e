//! Which call of its lane a decision goes on, and when a call goes.
//!
//! Decisions of one script [`Shape`] (and, on a cluster, of one slot) share
//! a [`Lane`]. A decision that finds its lane idle is sent at once, alone.
//! While a call is in flight the decisions that arrive wait, and a second
//! call goes beside it once as many wait as it carries (a single decision
//! sent by its own caller, as alone), or a quarter of a batch
//! (`max_batch / 4`, at least 2): Redis then finds the next call ready
//! instead of idling while the client reads the answers and sends again,
//! and two calls in flight carry about half the decisions in flight each.
//! A call that ends beside another sends what waits once half as many
//! wait as the other carries (or a quarter of a batch), else leaves it to
//! the other; one that ends alone sends all that waits.
//!
//! Two calls in flight can reach Redis in either order (one sent again
//! after its script was loaded again, redirected on a cluster, or written
//! by a task that ran late). So
//! below a quarter of a batch a call goes beside others only if none of
//! its decisions shares a key with them: decisions on other keys do not
//! depend on each other, and each is decided as in the order it came. A
//! quarter of a batch goes whatever its keys, and so does what waits
//! behind a call out longer than a fifth of the timeout (a far or stalled
//! Redis): two decisions on one key in two such calls may be decided in
//! either order, each exactly, as two requests at once may arrive in
//! either order.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use ::redis::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::call::{Call, MAX_BATCH};
use crate::backend::redis::script::Shape;
use crate::backend::BackendError;

/// A decision's answer from its batch: its own reply, or why none came.
pub(super) type Answer = Result<Value, BackendError>;

/// The decisions that may share a script call: one shape's, and on a
/// cluster one slot's (a call's keys never cross slots).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(in crate::backend::redis) struct Lane {
    pub(in crate::backend::redis) shape: Shape,
    pub(in crate::backend::redis) slot: u16,
}

/// A decision waiting in its lane.
pub(super) struct Waiting {
    pub(super) call: Call,
    pub(super) answer: oneshot::Sender<Answer>,
}

/// A call of a lane in flight, named so that its end is its own.
pub(super) type CallId = u64;

/// A call in flight: how many decisions it carries and, when fewer than a
/// quarter of a batch, their keys' hashes (what a call beside it must not
/// touch; unknown, any key may be among them).
struct Flight {
    id: CallId,
    decisions: usize,
    keys: Option<Vec<u64>>,
}

#[derive(Default)]
struct LaneState {
    waiting: VecDeque<Waiting>,
    /// The lane's calls in flight: when one ends, its sender sends what
    /// waits or leaves it to another.
    flights: Vec<Flight>,
    /// The name of the lane's next call.
    next_id: CallId,
    /// When the lane last sent a call.
    last_sent: Option<Instant>,
    /// How many times waiting decisions were taken: a flush due for those
    /// already taken does nothing.
    taken: u64,
    /// Whether a waiting decision will send the others if no call ends
    /// first.
    flush_due: bool,
}

/// The lanes of one backend (shared by its clones).
pub(in crate::backend::redis) struct Batches {
    max: usize,
    /// The longest a decision waits for a call in flight to end before it
    /// is sent anyway (a fifth of the timeout): a far or slow Redis is
    /// then asked by several calls at once.
    max_wait: Duration,
    lanes: Mutex<HashMap<Lane, LaneState>>,
    /// Keys' hashes, seeded per backend: a client cannot choose keys that
    /// collide (which would only make its decisions wait, as before).
    hasher: RandomState,
    /// Whether this backend sent each shape's batch script yet.
    sent: [AtomicBool; Shape::COUNT],
}

/// What a decision does on joining its lane.
pub(super) enum Turn {
    /// Nothing in flight: send it now, alone, as call `CallId`, then hand
    /// the lane on.
    Lead(Call, CallId),
    /// A call is in flight: wait for a batch, and if `flush`, send the
    /// waiting ones at that instant if none was taken before.
    Wait {
        answer: oneshot::Receiver<Answer>,
        flush: Option<(Instant, u64)>,
    },
    /// Enough wait beside the call in flight: send `batch` (this decision
    /// among them) now on a second call, then wait.
    Second {
        answer: oneshot::Receiver<Answer>,
        batch: Vec<Waiting>,
        id: CallId,
    },
}

impl Batches {
    pub(in crate::backend::redis) fn new(max: usize, max_wait: Duration) -> Self {
        Self {
            max: max.min(MAX_BATCH),
            max_wait,
            lanes: Mutex::new(HashMap::new()),
            hasher: RandomState::new(),
            sent: std::array::from_fn(|_| AtomicBool::new(false)),
        }
    }

    /// Whether the batch script of `shape` is sent for the first time: then
    /// as a whole (EVAL, one round trip, and Redis keeps it), not by its
    /// hash (EVALSHA, refused, then loaded and sent again: three round
    /// trips, past a far Redis's timeout), unless the user may not EVAL.
    pub(super) fn first_sent(&self, shape: Shape) -> bool {
        !self.sent[shape.index()].swap(true, Ordering::Relaxed)
    }

    /// A quarter of a batch, at least 2: as many waiting send a second call
    /// beside any call in flight.
    fn quarter(&self) -> usize {
        (self.max / 4).max(2)
    }

    fn hashes<'a>(&'a self, call: &'a Call) -> impl Iterator<Item = u64> + 'a {
        call.keys().map(|key| self.hasher.hash_one(key))
    }

    /// Record `batch` in flight on `state`: its name.
    fn fly<'a>(
        &self,
        state: &mut LaneState,
        batch: impl ExactSizeIterator<Item = &'a Call> + Clone,
    ) -> CallId {
        let decisions = batch.len();
        let keys = (decisions < self.quarter())
            .then(|| batch.flat_map(|call| self.hashes(call)).collect());
        state.next_id += 1;
        state.flights.push(Flight {
            id: state.next_id,
            decisions,
            keys,
        });
        state.next_id
    }

    /// Whether a decision still waited for may share a key with `flight`
    /// (any may if its keys are unknown); asked only when a call beside it
    /// is otherwise due.
    fn clash(&self, state: &LaneState, flight: &Flight) -> bool {
        let Some(keys) = &flight.keys else {
            return true;
        };
        let mut waiting = state.waiting.iter().filter(|w| !w.answer.is_closed());
        waiting.any(|w| self.hashes(&w.call).any(|h| keys.contains(&h)))
    }

    /// Whether what waits goes now on a call beside the ones in flight, as
    /// a decision joins or (`ended`) as a call ends: all of it when none is
    /// in flight; a quarter of a batch (joining, beside one call only);
    /// else, beside one call and if none of it may share a key with it, as
    /// many as that carries (half as many as a call ends beside it).
    fn second_due(&self, state: &LaneState, ended: bool) -> bool {
        let waiting = state.waiting.len();
        let enough = |only: &Flight| match ended {
            true => 2 * waiting >= only.decisions,
            false => waiting >= only.decisions,
        };
        match state.flights.as_slice() {
            [] => waiting > 0,
            [_, _, ..] if !ended => false,
            _ if waiting >= self.quarter() => true,
            [only] => waiting > 0 && enough(only) && !self.clash(state, only),
            _ => false,
        }
    }

    pub(super) fn join(&self, lane: Lane, call: Call) -> Turn {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        let state = lanes.entry(lane).or_default();
        let now = Instant::now();
        if state.flights.is_empty() {
            state.last_sent = Some(now);
            let id = self.fly(state, std::iter::once(&call));
            return Turn::Lead(call, id);
        }
        let (answer, receiver) = oneshot::channel();
        state.waiting.push_back(Waiting { call, answer });
        if self.second_due(state, false) {
            // (It holds this decision, whose answer is awaited.)
            let mut batch = state.take(self.max);
            if !batch.is_empty() {
                let id = self.fly(state, batch.iter().map(|w| &w.call));
                // This decision alone: its caller sends it, as a lead.
                if batch.len() == 1 && state.waiting.is_empty() {
                    if let Some(Waiting { call, .. }) = batch.pop() {
                        return Turn::Lead(call, id);
                    }
                }
                return Turn::Second {
                    answer: receiver,
                    batch,
                    id,
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

    /// Call `id` of the lane ended: the next batch its sender sends, and
    /// its name. Empty when none wait, or when they are left to a call
    /// still in flight (fewer wait than a second call beside it takes):
    /// the sender stops (and an idle lane is forgotten).
    pub(super) fn next(&self, lane: Lane, id: CallId) -> (Vec<Waiting>, CallId) {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(state) = lanes.get_mut(&lane) else {
            return (Vec::new(), id);
        };
        state.flights.retain(|f| f.id != id);
        let batch = match self.second_due(state, true) {
            true => state.take(self.max),
            false => Vec::new(),
        };
        if !batch.is_empty() {
            let id = self.fly(state, batch.iter().map(|w| &w.call));
            return (batch, id);
        }
        if state.flights.is_empty() {
            lanes.remove(&lane);
        }
        (batch, id)
    }

    /// The waiting decisions, to send now on a call of their own, unless
    /// they were taken since `taken`.
    pub(super) fn flush(&self, lane: Lane, taken: u64) -> (Vec<Waiting>, CallId) {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(state) = lanes.get_mut(&lane).filter(|s| s.taken == taken) else {
            return (Vec::new(), 0);
        };
        let batch = state.take(self.max);
        match batch.is_empty() {
            true => (batch, 0),
            false => {
                let id = self.fly(state, batch.iter().map(|w| &w.call));
                (batch, id)
            }
        }
    }
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
