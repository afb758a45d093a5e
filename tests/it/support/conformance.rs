//! What the conformance proptests share: random policies and what a user
//! can observe of a decision, to compare two backends request by request.

use std::time::Duration;

use proptest::prelude::*;
use tower_ratelimit::policy::{PenaltyBox, PolicyBuilder};
use tower_ratelimit::{Algorithm, Policy, Quota};

/// A policy of one to three limits from (algorithm, limit, window seconds, burst).
pub fn policy(limits: &[(usize, u32, u64, Option<u32>)], count_denied: bool) -> Policy {
    policy_builder("l", limits, count_denied).build().unwrap()
}

/// The builder of such a policy, its limits named `<prefix><n>`.
pub fn policy_builder(
    prefix: &str,
    limits: &[(usize, u32, u64, Option<u32>)],
    count_denied: bool,
) -> PolicyBuilder {
    let mut builder = Policy::builder().count_denied(count_denied);
    for (i, &(alg, limit, secs, burst)) in limits.iter().enumerate() {
        let algorithm = Algorithm::ALL[alg];
        let mut quota = Quota::new(limit, Duration::from_secs(secs)).unwrap();
        if let (Some(b), true) = (burst, algorithm.takes_burst()) {
            quota = quota.with_burst(b).unwrap();
        }
        builder = builder.limit(format!("{prefix}{i}"), algorithm, quota);
    }
    builder
}

pub fn limit_strategy() -> impl Strategy<Value = (usize, u32, u64, Option<u32>)> {
    (
        0usize..6,
        1u32..=12,
        prop_oneof![Just(1u64), Just(10), Just(60)],
        prop::option::of(1u32..=15),
    )
}

/// A penalty box from (strikes, window seconds, ban seconds, doublings).
pub fn penalty((strikes, within, ban, doublings): (u32, u64, u64, u32)) -> PenaltyBox {
    let s = Duration::from_secs;
    PenaltyBox::new(strikes, s(within), s(ban))
        .and_then(|p| p.max_ban(s(ban << doublings)))
        .unwrap()
}

pub fn penalty_strategy() -> impl Strategy<Value = Option<(u32, u64, u64, u32)>> {
    prop::option::of((1u32..=4, 1u64..=30, 1u64..=20, 0u32..=3))
}

/// What a user can observe of a decision, limit by limit.
pub fn observed(d: &tower_ratelimit::Decision) -> impl PartialEq + std::fmt::Debug {
    let outcomes: Vec<_> = d
        .outcomes()
        .map(|o| (o.verdict(), o.remaining(), o.reset_after_micros().as_u64()))
        .collect();
    (
        d.is_allowed(),
        d.verdict(),
        d.is_banned(),
        d.permit(),
        d.decided_by(),
        outcomes,
    )
}
