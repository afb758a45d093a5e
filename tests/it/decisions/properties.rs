//! Properties that must hold for every trace, checked with proptest on the
//! pure algorithms and on the memory backend. That each algorithm decides
//! as its definition says (and the three buckets as three textbook forms
//! of one rate) is `reference.rs`'s.

use std::sync::Barrier;
use std::thread;

use proptest::prelude::*;
use tower_ratelimit::algorithm::{
    FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingLogState, SlidingWindow, State, TokenBucket,
};
use tower_ratelimit::algorithm::{Outcome, Verdict};
use tower_ratelimit::backend::MemoryBackend;
use tower_ratelimit::clock::Micros;
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Policy, Quota};

/// Any of the six, driven through its public pure API.
enum Algo {
    Fixed(FixedWindow),
    Log(SlidingLog),
    Window(SlidingWindow),
    Token(TokenBucket),
    Leaky(LeakyBucket),
    Gcra(Gcra),
}

#[derive(Clone, Debug)]
enum St {
    Fixed(State),
    Log(SlidingLogState),
}

impl Algo {
    fn new(algorithm: Algorithm, quota: Quota) -> Self {
        match algorithm {
            Algorithm::FixedWindow => Algo::Fixed(FixedWindow::new(quota)),
            Algorithm::SlidingLog => Algo::Log(SlidingLog::new(quota)),
            Algorithm::SlidingWindow => Algo::Window(SlidingWindow::new(quota)),
            Algorithm::TokenBucket => Algo::Token(TokenBucket::new(quota)),
            Algorithm::LeakyBucket => Algo::Leaky(LeakyBucket::new(quota)),
            Algorithm::Gcra => Algo::Gcra(Gcra::new(quota)),
        }
    }

    fn fresh(&self) -> St {
        match self {
            Algo::Log(_) => St::Log(SlidingLogState::default()),
            _ => St::Fixed(State::default()),
        }
    }

    fn check(&self, st: &mut St, now: u64, cost: u32) -> Outcome {
        match (self, st) {
            (Algo::Fixed(a), St::Fixed(s)) => a.check(*s, Micros::new(now), cost),
            (Algo::Window(a), St::Fixed(s)) => a.check(*s, Micros::new(now), cost),
            (Algo::Token(a), St::Fixed(s)) => a.check(*s, Micros::new(now), cost),
            (Algo::Leaky(a), St::Fixed(s)) => a.check(*s, Micros::new(now), cost),
            (Algo::Gcra(a), St::Fixed(s)) => a.check(*s, Micros::new(now), cost),
            (Algo::Log(a), St::Log(s)) => a.check(s, Micros::new(now), cost),
            _ => unreachable!("state matches its algorithm"),
        }
    }

    fn consume(&self, st: &mut St, now: u64, cost: u32) {
        match (self, st) {
            (Algo::Fixed(a), St::Fixed(s)) => *s = a.consume(*s, Micros::new(now), cost),
            (Algo::Window(a), St::Fixed(s)) => *s = a.consume(*s, Micros::new(now), cost),
            (Algo::Token(a), St::Fixed(s)) => *s = a.consume(*s, Micros::new(now), cost),
            (Algo::Leaky(a), St::Fixed(s)) => *s = a.consume(*s, Micros::new(now), cost),
            (Algo::Gcra(a), St::Fixed(s)) => *s = a.consume(*s, Micros::new(now), cost),
            (Algo::Log(a), St::Log(s)) => a.consume(s, Micros::new(now), cost),
            _ => unreachable!("state matches its algorithm"),
        }
    }

    /// Run `trace` (gaps and costs), returning the admitted (time, cost)s.
    fn run(&self, start: u64, trace: &[(u64, u32)]) -> (St, u64, Vec<(u64, u32)>) {
        let mut st = self.fresh();
        let mut now = start;
        let mut admitted = Vec::new();
        for &(gap, cost) in trace {
            now += gap;
            if self.check(&mut st, now, cost).is_allowed() {
                self.consume(&mut st, now, cost);
                admitted.push((now, cost));
            }
        }
        (st, now, admitted)
    }
}

fn quota() -> impl Strategy<Value = Quota> {
    (
        1u32..=20,
        prop_oneof![
            Just(1_000u64),
            Just(1_000_000),
            Just(60_000_000),
            1u64..5_000_000
        ],
    )
        .prop_filter_map("valid quota", |(limit, window_us)| {
            Quota::new(limit, std::time::Duration::from_micros(window_us)).ok()
        })
}

/// Gaps up to about two windows and costs up to a bit over the limit.
fn trace(quota: Quota) -> impl Strategy<Value = Vec<(u64, u32)>> {
    let w = quota.window().as_micros() as u64;
    let gap = prop_oneof![Just(0u64), 0..w / 4 + 1, 0..2 * w + 1];
    prop::collection::vec((gap, 1..=quota.limit() + 1), 1..120)
}

fn quota_and_trace() -> impl Strategy<Value = (Quota, Vec<(u64, u32)>, u64)> {
    quota().prop_flat_map(|q| (Just(q), trace(q), 0u64..10_000_000_000))
}

/// Admitted cost in every window `(t − w, t]` that ends at an admission.
fn max_in_any_window(admitted: &[(u64, u32)], w: u64) -> u64 {
    admitted
        .iter()
        .map(|&(t, _)| {
            admitted
                .iter()
                .filter(|&&(a, _)| a + w > t && a <= t)
                .map(|&(_, c)| u64::from(c))
                .sum()
        })
        .max()
        .unwrap_or(0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The sliding log is exact: no window of length W holds more than the limit.
    #[test]
    fn sliding_log_never_exceeds_the_limit_in_any_window((q, trace, start) in quota_and_trace()) {
        let (_, _, admitted) = Algo::new(Algorithm::SlidingLog, q).run(start, &trace);
        let w = q.window().as_micros() as u64;
        prop_assert!(max_in_any_window(&admitted, w) <= u64::from(q.limit()));
    }

    /// A fixed window never admits more than the limit within one aligned window.
    #[test]
    fn fixed_window_never_exceeds_the_limit_per_window((q, trace, start) in quota_and_trace()) {
        let (_, _, admitted) = Algo::new(Algorithm::FixedWindow, q).run(start, &trace);
        let w = q.window().as_micros() as u64;
        let mut per_window = std::collections::HashMap::<u64, u64>::new();
        for (t, c) in admitted {
            *per_window.entry(t / w).or_default() += u64::from(c);
        }
        prop_assert!(per_window.values().all(|&n| n <= u64::from(q.limit())));
    }

    /// The sliding window counter: at most the limit per aligned window, and
    /// under twice the limit in any window of length W (its documented bound).
    #[test]
    fn sliding_window_stays_within_its_bound((q, trace, start) in quota_and_trace()) {
        let (_, _, admitted) = Algo::new(Algorithm::SlidingWindow, q).run(start, &trace);
        let w = q.window().as_micros() as u64;
        prop_assert!(max_in_any_window(&admitted, w) < 2 * u64::from(q.limit()));
        let mut per_window = std::collections::HashMap::<u64, u64>::new();
        for (t, c) in admitted {
            *per_window.entry(t / w).or_default() += u64::from(c);
        }
        prop_assert!(per_window.values().all(|&n| n <= u64::from(q.limit())));
    }

    /// The bucket algorithms admit at most the burst plus what refills:
    /// in any interval [t1, t2], at most B + ⌊(t2 − t1) / T⌋.
    #[test]
    fn buckets_admit_at_most_burst_plus_refill(
        (q, trace, start) in quota_and_trace(),
        burst in 1u32..=30,
        which in 0usize..3,
    ) {
        let Ok(q) = q.with_burst(burst) else { return Ok(()) };
        let algorithm = [Algorithm::TokenBucket, Algorithm::LeakyBucket, Algorithm::Gcra][which];
        let (_, _, admitted) = Algo::new(algorithm, q).run(start, &trace);
        let t = (q.window().as_micros() as u64).div_ceil(u64::from(q.limit()));
        for (i, &(t1, _)) in admitted.iter().enumerate() {
            let mut sum = 0u64;
            for &(t2, c) in &admitted[i..] {
                sum += u64::from(c);
                prop_assert!(sum <= u64::from(burst) + (t2 - t1) / t, "{sum} in [{t1}, {t2}]");
            }
        }
    }

    /// Retry-after is exact: the same request is still denied a microsecond
    /// before it, and allowed at it. It is never zero; a request that can
    /// never fit says so.
    #[test]
    fn retry_after_is_exact(
        (q, trace, start) in quota_and_trace(),
        which in 0usize..6,
        cost in 1u32..=21,
    ) {
        let algo = Algo::new(Algorithm::ALL[which], q);
        let (st, now, _) = algo.run(start, &trace);
        let outcome = algo.check(&mut st.clone(), now, cost);
        match outcome.verdict() {
            Verdict::Allowed => prop_assert!(cost <= q.limit()),
            Verdict::Never => prop_assert!(cost > q.limit()),
            Verdict::RetryAfter(r) => {
                let r = r.as_u64();
                prop_assert!(!algo.check(&mut st.clone(), now + r - 1, cost).is_allowed());
                prop_assert!(algo.check(&mut st.clone(), now + r, cost).is_allowed());
            }
        }
        prop_assert!(outcome.remaining() <= q.limit());
    }

    /// Checking never changes a decision: a cost-0 peek between requests
    /// leaves every later decision as it was.
    #[test]
    fn peeking_changes_nothing((q, trace, start) in quota_and_trace(), which in 0usize..6) {
        let algo = Algo::new(Algorithm::ALL[which], q);
        let (_, _, plain) = algo.run(start, &trace);
        let peeked: Vec<(u64, u32)> = trace.iter().flat_map(|&(gap, c)| [(gap, 0), (0, c)]).collect();
        let (_, _, with_peeks) = algo.run(start, &peeked);
        let with_peeks: Vec<_> = with_peeks.into_iter().filter(|&(_, c)| c > 0).collect();
        prop_assert_eq!(plain, with_peeks);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Between threads, time can step back a little: one reads the clock,
    /// another reads it later but takes the lock first. No algorithm may
    /// panic (overflow) or report more than its capacity.
    #[test]
    fn time_stepping_back_a_little_breaks_nothing(
        (q, trace, start) in quota_and_trace(),
        which in 0usize..6,
        jitter in prop::collection::vec(0u64..2_000, 120),
    ) {
        let algo = Algo::new(Algorithm::ALL[which], q);
        let capacity = q.burst().unwrap_or(0).max(q.limit());
        let mut st = algo.fresh();
        let mut now = start + 10_000;
        for (&(gap, cost), &back) in trace.iter().zip(&jitter) {
            now += gap;
            let seen = now - back;
            let outcome = algo.check(&mut st, seen, cost);
            prop_assert!(outcome.remaining() <= capacity);
            prop_assert!(outcome.retry_after_micros().map(Micros::as_u64) != Some(0));
            if outcome.is_allowed() {
                algo.consume(&mut st, seen, cost);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Two threads sending at once admit exactly what one thread sending the
    /// same requests in sequence admits, step by step.
    #[test]
    fn two_threads_admit_what_a_sequential_run_admits(
        which in 0usize..6,
        steps in prop::collection::vec((0u64..3_000_000, 1usize..40, 1u32..4), 1..12),
    ) {
        let algorithm = Algorithm::ALL[which];
        let policy = Policy::single(algorithm, Quota::per_minute(50).unwrap()).unwrap();
        let key = Key::new("user", "shared");
        let times: Vec<u64> = steps
            .iter()
            .scan(0, |now, &(gap, _, _)| { *now += gap; Some(*now) })
            .collect();

        let sequential = MemoryBackend::new();
        let expected: Vec<usize> = steps
            .iter()
            .zip(&times)
            .map(|(&(_, n, cost), &now)| {
                (0..2 * n).filter(|_| sequential.check_at(&key, &policy, cost, Micros::new(now)).is_allowed()).count()
            })
            .collect();

        let concurrent = MemoryBackend::new();
        let barrier = Barrier::new(2);
        let per_thread: Vec<Vec<usize>> = thread::scope(|s| {
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        steps
                            .iter()
                            .zip(&times)
                            .map(|(&(_, n, cost), &now)| {
                                barrier.wait();
                                let admitted = (0..n)
                                    .filter(|_| concurrent.check_at(&key, &policy, cost, Micros::new(now)).is_allowed())
                                    .count();
                                barrier.wait();
                                admitted
                            })
                            .collect()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let actual: Vec<usize> = (0..steps.len()).map(|i| per_thread[0][i] + per_thread[1][i]).collect();
        prop_assert_eq!(actual, expected);
    }
}
