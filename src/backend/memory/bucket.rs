//! A bucket's state in one word, and the check that changes it without the
//! shard's write lock.
//!
//! Token bucket, leaky bucket and GCRA keep one number per key, the
//! theoretical arrival time (TAT). Kept alone in an atomic word, a lone
//! bucket limit (the commonest policy) is decided under the shard's *read*
//! lock with one compare-and-swap: threads deciding other keys of the shard,
//! or the same key, never wait for each other's arithmetic. Exact all the
//! same: each swap replaces the very TAT its decision was computed from, so
//! two racing admissions are ordered as if one had come first, and a
//! denial, which changes nothing, is a plain read.
//!
//! The write lock is still what inserts, removes and moves slots (a new key,
//! reclaiming, growing), so a slot found under the read lock stays that
//! key's until the read lock is let go.

use std::sync::atomic::{AtomicU64, Ordering};

use super::table::Expires;
use crate::algorithm::{Gcra, State};
use crate::{algorithm::Outcome, clock::Micros};

/// One bucket's TAT in µs: 8 bytes, so a slot with its fingerprint is 16.
#[derive(Debug, Default)]
pub(crate) struct Tat(AtomicU64);

impl Tat {
    /// The bucket state `state` holds (its `expires_at`; a bucket's `value`
    /// is always 0).
    #[inline]
    pub(crate) fn new(state: State) -> Self {
        Self(AtomicU64::new(state.expires_at.as_u64()))
    }

    /// The state as the algorithms read it.
    #[inline]
    pub(crate) fn get(&self) -> State {
        as_state(self.0.load(Ordering::Acquire))
    }

    /// Replace the state (under the write lock: no other thread sees it).
    #[inline]
    pub(crate) fn set(&mut self, state: State) {
        *self.0.get_mut() = state.expires_at.as_u64();
    }

    /// Decide a request of `cost` at `now` and count it if it fits, with
    /// nothing but shared access: read, decide, swap in the new TAT if the
    /// old one is still there, else decide again on what replaced it.
    #[inline]
    pub(crate) fn check_and_consume(&self, gcra: &Gcra, now: Micros, cost: u32) -> Outcome {
        let mut tat = self.0.load(Ordering::Acquire);
        loop {
            let outcome = gcra.check(as_state(tat), now, cost);
            if cost == 0 || !outcome.is_allowed() {
                return outcome;
            }
            let after = gcra.consume(as_state(tat), now, cost).expires_at.as_u64();
            match self
                .0
                .compare_exchange_weak(tat, after, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return outcome,
                Err(current) => tat = current,
            }
        }
    }
}

#[inline]
fn as_state(tat: u64) -> State {
    State {
        expires_at: Micros::new(tat),
        value: 0,
    }
}

impl Expires for Tat {
    #[inline]
    fn expires_at(&self) -> Micros {
        Micros::new(self.0.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::Quota;

    /// Threads racing on one word admit exactly what one thread would.
    #[test]
    fn racing_admissions_never_pass_the_capacity() {
        let gcra = Gcra::new(Quota::per_hour(10_000).unwrap());
        let tat = Arc::new(Tat::default());
        let now = Micros::from_secs(1);
        let admitted: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let (tat, gcra) = (Arc::clone(&tat), &gcra);
                    s.spawn(move || {
                        (0..5_000)
                            .filter(|_| tat.check_and_consume(gcra, now, 1).is_allowed())
                            .count()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(admitted, 10_000);
        assert!(!tat.check_and_consume(&gcra, now, 1).is_allowed());
    }
}
