//! A store of our own over a plain `Mutex<HashMap>`, made a whole backend by
//! `StoreBackend`: it decides exactly as the memory backend does.

use proptest::prelude::*;
use tower_ratelimit::backend::{Backend, MemoryBackend, StateStore, StoreBackend};
use tower_ratelimit::clock::{ManualClock, Micros};
use tower_ratelimit::key::Key;

use crate::support::conformance::{limit_strategy, observed, penalty, penalty_strategy, policy};
use crate::support::store::Map;

/// Both backends on one manual clock.
fn both() -> (
    ManualClock,
    StoreBackend<Map, ManualClock>,
    MemoryBackend<ManualClock>,
) {
    let clock = ManualClock::new(Micros::ZERO);
    let store = StoreBackend::new(Map::default()).clock(clock.clone());
    let memory = MemoryBackend::builder().clock(clock.clone()).build();
    (clock, store, memory)
}

fn now<F: std::future::Future>(future: F) -> F::Output {
    // Both backends answer with a ready future.
    futures_util::FutureExt::now_or_never(future).expect("a ready future")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The same trace of checks and settlements, through a store of our own
    /// and through the memory backend, gives identical decisions, for every
    /// algorithm, mix of limits, counted denials and penalty box.
    #[test]
    fn a_store_of_our_own_decides_exactly_as_memory_does(
        limits in prop::collection::vec(limit_strategy(), 1..=3),
        count_denied in any::<bool>(),
        penalized in penalty_strategy(),
        trace in prop::collection::vec(
            (prop_oneof![Just(0u64), 0u64..400_000, 0u64..90_000_000], 0u32..=14, prop::option::of(0u32..=8)),
            1..60,
        ),
        start in 1_600_000_000_000_000u64..1_800_000_000_000_000,
    ) {
        let mut policy = policy(&limits, count_denied);
        if let Some(p) = penalized {
            policy = policy.to_builder().penalty(penalty(p)).build().unwrap();
        }
        let (clock, store, memory) = both();
        let key = Key::new("user", "conformance");
        let mut at = start;
        for (i, &(gap, cost, settle)) in trace.iter().enumerate() {
            at += gap;
            clock.set(Micros::new(at));
            let expected = memory.check_now(&key, &policy, cost);
            let actual = store.check_now(&key, &policy, cost);
            prop_assert_eq!(observed(&actual), observed(&expected), "check {} at {} cost {} under {:?}", i, at, cost, policy);
            if let (Some(used), true) = (settle, expected.is_allowed() && !count_denied) {
                at += gap / 3;
                clock.set(Micros::new(at));
                let expected = now(memory.settle(&key, &policy, cost, used)).unwrap();
                let actual = now(store.settle(&key, &policy, cost, used)).unwrap();
                prop_assert_eq!(observed(&actual), observed(&expected), "settle {} of {} to {}", i, cost, used);
            }
        }
    }
}

#[test]
fn permits_are_taken_renewed_and_given_back_as_in_memory() {
    use std::time::Duration;
    use tower_ratelimit::{Limit, Policy};
    let policy = Policy::builder()
        .with(
            Limit::concurrent("flight", 2)
                .unwrap()
                .lease(Duration::from_secs(5))
                .unwrap(),
        )
        .build()
        .unwrap();
    let (clock, store, memory) = both();
    clock.set(Micros::from_secs(1_000));
    let key = Key::new("user", "in-flight");
    let first = store.check_now(&key, &policy, 1);
    assert_eq!(
        observed(&first),
        observed(&memory.check_now(&key, &policy, 1))
    );
    assert_eq!(
        observed(&store.check_now(&key, &policy, 1)),
        observed(&memory.check_now(&key, &policy, 1))
    );
    assert!(
        !store.check_now(&key, &policy, 1).is_allowed(),
        "two in flight at most"
    );
    let permit = first.permit().unwrap();
    clock.set(Micros::from_secs(1_002));
    let renewed = now(store.renew(&key, &policy, permit, 1)).unwrap();
    assert_eq!(
        observed(&renewed),
        observed(&now(memory.renew(&key, &policy, permit, 1)).unwrap())
    );
    let released = now(store.release(&key, &policy, renewed.permit().unwrap(), 1)).unwrap();
    assert_eq!(released.deciding().remaining(), 1, "one given back");
    assert!(store.check_now(&key, &policy, 1).is_allowed());
}

#[test]
fn a_full_store_refuses_new_keys_and_forgets_expired_ones() {
    let (clock, store, _) = both();
    let store = store.max_keys(2);
    let policy: tower_ratelimit::Policy = "5/s".parse().unwrap();
    clock.set(Micros::from_secs(100));
    for user in ["a", "b"] {
        assert!(store
            .check_now(&Key::new("user", user), &policy, 1)
            .is_allowed());
    }
    let third = store.check_now(&Key::new("user", "c"), &policy, 1);
    assert!(!third.is_allowed() && third.is_capacity_exhausted());
    assert!(
        store
            .check_now(&Key::new("user", "a"), &policy, 1)
            .is_allowed(),
        "known keys go on"
    );
    assert_eq!(store.store().keys(), 2);
    // Once their states expire, the keys are forgotten at their next
    // decision, and a new key finds room.
    clock.set(Micros::from_secs(110));
    for user in ["a", "b"] {
        let peek = store.check_now(&Key::new("user", user), &policy, 0);
        assert!(peek.is_allowed());
    }
    assert_eq!(store.store().keys(), 0);
    assert!(store
        .check_now(&Key::new("user", "c"), &policy, 1)
        .is_allowed());
}

/// A store that must evict (an LRU, a cache) can tell which keys to keep:
/// a key whose budget denied a request, or that is banned, says so; a
/// client with budget left does not.
#[test]
fn a_store_is_told_which_keys_to_evict_last() {
    let clock = ManualClock::new(Micros::ZERO);
    let map = Map::default();
    let store = StoreBackend::new(map.clone()).clock(clock.clone());
    let kept = |key: &Key| map.update(key, |states| states.is_kept());
    let two: tower_ratelimit::Policy = "2/min".parse().unwrap();
    let (ann, bob) = (Key::new("user", "ann"), Key::new("user", "bob"));
    store.check_now(&ann, &two, 1);
    store.check_now(&bob, &two, 1);
    store.check_now(&bob, &two, 1);
    assert!(!kept(&ann) && !kept(&bob), "budget left: nothing to keep");
    assert!(!store.check_now(&bob, &two, 1).is_allowed());
    assert!(kept(&bob), "bob's spent budget denied him");
    assert!(!kept(&ann));

    let banning = tower_ratelimit::Policy::builder()
        .limit(
            "ip",
            tower_ratelimit::Algorithm::SlidingWindow,
            "1/min".parse().unwrap(),
        )
        .penalty(penalty((1, 60, 300, 0)))
        .build()
        .unwrap();
    let ip = Key::new("ip", "203.0.113.7");
    store.check_now(&ip, &banning, 1);
    // A denial, which strikes and bans: the ban is kept.
    store.check_now(&ip, &banning, 1);
    assert!(store.check_now(&ip, &banning, 1).is_banned());
    assert!(kept(&ip));
}
