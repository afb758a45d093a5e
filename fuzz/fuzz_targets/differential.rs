//! The memory backend against the reference model (`tests/it/support/
//! reference.rs`, written from the algorithms' definitions and sharing no
//! code with the crate): a random trace of requests (time steps and costs)
//! under a random quota must get the same decision from both, for every
//! algorithm, and the same retry time (the sliding window counter's only
//! as "later").
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use tower_ratelimit::backend::MemoryBackend;
use tower_ratelimit::clock::Micros;
use tower_ratelimit::algorithm::Verdict;
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Policy, Quota};

#[path = "../../tests/it/support/reference.rs"]
mod reference;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let algorithm = Algorithm::ALL[usize::from(data[0]) % 6];
    let limit = u32::from(data[1] % 16) + 1;
    let window_us = u64::from(data[2]) * 10_000 + 10_000;
    let Ok(mut quota) = Quota::new(limit, Duration::from_micros(window_us)) else {
        return;
    };
    let mut burst = None;
    if algorithm.takes_burst() && data[3] % 2 == 1 {
        let wanted = u32::from(data[3] / 2 % 32) + 1;
        let Ok(bursty) = quota.with_burst(wanted) else {
            return;
        };
        quota = bursty;
        burst = Some(u64::from(wanted));
    }
    // Past the sliding log's entry cap the policy is refused: not a trace.
    let Ok(policy) = Policy::single(algorithm, quota) else {
        return;
    };
    let backend = MemoryBackend::new();
    let key = Key::new("fuzz", b"k");
    let mut model = reference::Reference::new(algorithm, u64::from(limit), window_us, burst);
    let mut now = 1_000_000_000u64;
    for step in data[4..].chunks(2) {
        now += u64::from(step[0]) * 997;
        let cost = u32::from(*step.get(1).unwrap_or(&1) % 4) + 1;
        let decided = backend.check_at(&key, &policy, cost, Micros::new(now)).verdict();
        let fits = model.fits(now, u64::from(cost));
        if fits {
            model.admit(now, u64::from(cost));
        }
        match (decided, fits, model.fits_from(now, u64::from(cost))) {
            (Verdict::Allowed, true, _) => {}
            (Verdict::Never, false, None) => {}
            (Verdict::RetryAfter(_), false, Some(_)) if algorithm == Algorithm::SlidingWindow => {}
            (Verdict::RetryAfter(after), false, Some(at)) => {
                assert_eq!(now + after.as_u64(), at, "{algorithm} {quota:?} at {now} cost {cost}")
            }
            (decided, fits, _) => {
                panic!("{algorithm} {quota:?} at {now} cost {cost}: {decided:?}, the model fits: {fits}")
            }
        }
    }
});
