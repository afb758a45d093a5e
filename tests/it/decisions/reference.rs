//! The memory backend, a store of your own and Redis, each against the
//! reference model of every algorithm (`support/reference.rs`): written
//! from the definitions, slow on purpose, sharing nothing with `src/`. The
//! three buckets are three textbook forms there (credit, level, arrival
//! time), so their agreement is checked too, against definitions of their
//! own.

use std::time::Duration;

use proptest::prelude::*;

use crate::support::reference::Reference;
use crate::support::store::Map;
use tower_ratelimit::algorithm::Verdict;
use tower_ratelimit::backend::{MemoryBackend, StoreBackend};
use tower_ratelimit::clock::{ManualClock, Micros};
use tower_ratelimit::key::Key;
use tower_ratelimit::{Algorithm, Policy, Quota};

/// A limit, and a trace of (gap, cost) from a start time.
#[derive(Clone, Debug)]
struct Case {
    algorithm: Algorithm,
    limit: u32,
    window: u64,
    burst: Option<u32>,
    start: u64,
    trace: Vec<(u64, u32)>,
}

impl Case {
    fn policy(&self) -> Policy {
        let mut quota = Quota::new(self.limit, Duration::from_micros(self.window)).unwrap();
        if let Some(burst) = self.burst {
            quota = quota.with_burst(burst).unwrap();
        }
        Policy::single(self.algorithm, quota).unwrap()
    }
}

fn case() -> impl Strategy<Value = Case> {
    (
        0usize..6,
        1u32..=12,
        prop_oneof![
            Just(1_000u64),
            Just(1_000_000),
            Just(60_000_000),
            7u64..3_000_000
        ],
        prop::option::of(1u32..=3),
        0u64..4_000_000_000_000,
    )
        .prop_flat_map(|(which, limit, window, burst_factor, start)| {
            let algorithm = Algorithm::ALL[which];
            let buckets = matches!(
                algorithm,
                Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra
            );
            let burst = burst_factor.filter(|_| buckets).map(|f| limit * f);
            let gap = prop_oneof![Just(0u64), 0..window / 4 + 1, 0..2 * window + 1];
            let trace =
                prop::collection::vec((gap, 1..=limit * burst_factor.unwrap_or(1) + 1), 1..60);
            (
                Just(algorithm),
                Just(limit),
                Just(window),
                Just(burst),
                Just(start),
                trace,
            )
        })
        .prop_filter("a valid quota", |(_, limit, window, burst, _, _)| {
            let quota = Quota::new(*limit, Duration::from_micros(*window));
            quota.is_ok_and(|q| burst.is_none_or(|b| q.with_burst(b).is_ok()))
        })
        .prop_map(|(algorithm, limit, window, burst, start, trace)| Case {
            algorithm,
            limit,
            window,
            burst,
            start,
            trace,
        })
}

/// What a backend said of one request: allowed, or when it would be.
#[derive(Debug, PartialEq, Eq)]
enum Said {
    Allowed,
    RetryAt(u64),
    Never,
}

/// The reference's answers along the trace, admitting as it goes.
fn expected(case: &Case) -> Vec<Said> {
    let mut reference = Reference::new(
        case.algorithm,
        u64::from(case.limit),
        case.window,
        case.burst.map(u64::from),
    );
    let mut now = case.start;
    let mut said = Vec::new();
    for &(gap, cost) in &case.trace {
        now += gap;
        let cost = u64::from(cost);
        if reference.fits(now, cost) {
            reference.admit(now, cost);
            said.push(Said::Allowed);
        } else {
            said.push(match reference.fits_from(now, cost) {
                Some(at) => Said::RetryAt(at),
                None => Said::Never,
            });
        }
    }
    said
}

/// The answers of `decide(key, policy, cost, now)` along the trace. The
/// sliding window counter's retry-after is compared only as "later".
fn observed(case: &Case, mut decide: impl FnMut(u32, u64) -> Verdict) -> Vec<Said> {
    let mut now = case.start;
    case.trace
        .iter()
        .map(|&(gap, cost)| {
            now += gap;
            match decide(cost, now) {
                Verdict::Allowed => Said::Allowed,
                Verdict::Never => Said::Never,
                Verdict::RetryAfter(after) => Said::RetryAt(now + after.as_u64()),
            }
        })
        .collect()
}

/// The two lists, equal but for the sliding window counter's retry times,
/// which are only checked to be later than the request.
fn agree(case: &Case, expected: &[Said], observed: &[Said]) -> Result<(), TestCaseError> {
    prop_assert_eq!(expected.len(), observed.len());
    for (i, (e, o)) in expected.iter().zip(observed).enumerate() {
        match (case.algorithm, e, o) {
            (Algorithm::SlidingWindow, Said::RetryAt(_), Said::RetryAt(_)) => {}
            _ => prop_assert_eq!(e, o, "request {} of {:?}", i, case),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The memory backend decides as the reference does, every algorithm.
    #[test]
    fn the_memory_backend_decides_as_the_reference(case in case()) {
        let backend = MemoryBackend::new();
        let (policy, key) = (case.policy(), Key::new("user", "a"));
        let got = observed(&case, |cost, now| backend.check_at(&key, &policy, cost, Micros::new(now)).verdict());
        agree(&case, &expected(&case), &got)?;
    }

    /// A store of your own (`StoreBackend`) decides as the reference does.
    #[test]
    fn a_store_of_your_own_decides_as_the_reference(case in case()) {
        let clock = ManualClock::new(Micros::new(case.start));
        let backend = StoreBackend::new(Map::default()).clock(clock.clone());
        let (policy, key) = (case.policy(), Key::new("user", "a"));
        let got = observed(&case, |cost, now| {
            clock.set(Micros::new(now));
            backend.check_now(&key, &policy, cost).verdict()
        });
        agree(&case, &expected(&case), &got)?;
    }
}

#[cfg(feature = "redis")]
mod on_redis {
    use super::*;
    use crate::support::RedisServer;
    use tower_ratelimit::backend::RedisBackend;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// Redis's script decides as the reference does, every algorithm.
        #[test]
        fn redis_decides_as_the_reference(case in case()) {
            let url = RedisServer::per_thread_url();
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let backend = rt
                .block_on(RedisBackend::builder(&url).timeout(Duration::from_secs(5)).connect())
                .unwrap();
            // A key of its own per case: the server outlives the cases.
            let key = Key::new("case", format!("{case:?}"));
            let policy = case.policy();
            let got = observed(&case, |cost, now| {
                rt.block_on(backend.check_at(&key, &policy, cost, Micros::new(now)))
                    .unwrap()
                    .verdict()
            });
            agree(&case, &expected(&case), &got)?;
        }
    }
}
