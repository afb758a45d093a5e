//! The memory backend against the pure algorithms: a random trace of
//! requests (time steps and costs) under a random quota must get the same
//! decision from both, for every algorithm.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use tower_ratelimit::algorithm::{
    FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingLogState, SlidingWindow, State, TokenBucket,
};
use tower_ratelimit::backend::MemoryBackend;
use tower_ratelimit::clock::Micros;
use tower_ratelimit::decision::Outcome;
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Policy, Quota};

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let algorithm = Algorithm::ALL[usize::from(data[0]) % 6];
    let limit = u32::from(data[1] % 16) + 1;
    let window = Duration::from_millis(u64::from(data[2]) * 10 + 10);
    let Ok(mut quota) = Quota::new(limit, window) else {
        return;
    };
    if algorithm.takes_burst() && data[3] % 2 == 1 {
        let Ok(bursty) = quota.with_burst(u32::from(data[3] / 2 % 32) + 1) else {
            return;
        };
        quota = bursty;
    }
    // Past the sliding log's entry cap the policy is refused: not a trace.
    let Ok(policy) = Policy::single(algorithm, quota) else {
        return;
    };
    let backend = MemoryBackend::new();
    let key = Key::new("fuzz", b"k");
    let mut state = State::default();
    let mut log = SlidingLogState::default();
    let mut now = Micros::from_secs(1_000);
    for step in data[4..].chunks(2) {
        now = now + Micros::new(u64::from(step[0]) * 997);
        let cost = u32::from(*step.get(1).unwrap_or(&1) % 4);
        let model: Outcome = match algorithm {
            Algorithm::SlidingLog => {
                let a = SlidingLog::new(quota);
                let o = a.check(&mut log, now, cost);
                if o.is_allowed() && cost > 0 {
                    a.consume(&mut log, now, cost);
                }
                o
            }
            _ => {
                let (o, next) = match algorithm {
                    Algorithm::FixedWindow => {
                        let a = FixedWindow::new(quota);
                        (a.check(state, now, cost), a.consume(state, now, cost))
                    }
                    Algorithm::SlidingWindow => {
                        let a = SlidingWindow::new(quota);
                        (a.check(state, now, cost), a.consume(state, now, cost))
                    }
                    Algorithm::TokenBucket => {
                        let a = TokenBucket::new(quota);
                        (a.check(state, now, cost), a.consume(state, now, cost))
                    }
                    Algorithm::LeakyBucket => {
                        let a = LeakyBucket::new(quota);
                        (a.check(state, now, cost), a.consume(state, now, cost))
                    }
                    _ => {
                        let a = Gcra::new(quota);
                        (a.check(state, now, cost), a.consume(state, now, cost))
                    }
                };
                if o.is_allowed() && cost > 0 {
                    state = next;
                }
                o
            }
        };
        let decided = backend.check_at(&key, &policy, cost, now).deciding();
        assert_eq!(
            decided.verdict(),
            model.verdict(),
            "{algorithm} {quota:?} at {now:?} cost {cost}"
        );
        assert_eq!(decided.remaining(), model.remaining());
        if model.is_allowed() {
            assert_eq!(decided.reset_after(), model.reset_after());
        }
    }
});
