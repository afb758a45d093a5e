//! One decision on one key's states, under whatever lock guards them: the
//! all-or-nothing check and commit, counted denials, the penalty box, room
//! for a new key, settling, permits. The memory backend runs it on a shard
//! of its tables; a [`StoreBackend`](crate::backend::StoreBackend) on the
//! states an outside store keeps for one key. One code, one meaning.

use super::bucket::Tat;
use super::shard::{fingerprint, Entries, Shard, TimedLog};
use super::AtCapacity;
use crate::algorithm::{Form, State};
use crate::policy::MAX_LIMITS;
use crate::{algorithm::Outcome, clock::Micros, Decision, Limit, Policy};

/// A check under one limit (not of requests in flight), no penalty box,
/// denials not counted: the common case on its own path. The same shard
/// steps as [`check`], without its per-limit arrays and reports; the same
/// outcome (`None`: not this case, or a full table, left to [`check`]).
#[inline]
pub(crate) fn check_one<S, L, B>(
    shard: &mut Shard<S, L, B>,
    policy: &Policy,
    base: u64,
    cost: u32,
    now: Micros,
    at_capacity: AtCapacity,
) -> Option<Outcome>
where
    S: Entries<State>,
    L: Entries<TimedLog>,
    B: Entries<Tat>,
{
    let limit = lone_limit(policy)?;
    let fp = fingerprint(base, limit.id());
    let (outcome, mut slot) = shard.check(limit, fp, now, cost);
    if !outcome.is_allowed() {
        if let Some(slot) = slot.filter(|_| cost > 0) {
            keep(shard, limit, slot);
        }
    } else if cost > 0 {
        if let Form::Log(_) = limit.rule().form() {
            let mut found = [(fp, slot)];
            if shard
                .lacks_log_bytes(policy.limits(), &mut found, now)
                .is_some()
            {
                return None;
            }
            slot = found[0].1;
        }
        match slot {
            Some(slot) => shard.consume_at(limit, slot, now, cost),
            None if matches!(at_capacity, AtCapacity::Deny)
                && shard
                    .lacks_room(policy.limits(), &[(fp, None)], now)
                    .is_some() =>
            {
                return None
            }
            None => shard.consume_new(limit, fp, now, cost),
        }
    }
    Some(outcome)
}

/// Mark `limit`'s state in `slot`, which denied a request, to be evicted
/// last (see [`Shard::keep_denying`]).
fn keep<S, L, B>(shard: &mut Shard<S, L, B>, limit: &Limit, slot: usize)
where
    S: Entries<State>,
    L: Entries<TimedLog>,
    B: Entries<Tat>,
{
    match limit.rule().form() {
        Form::Fixed(_) => shard.states.keep(slot),
        Form::Bucket(_) => shard.buckets.keep(slot),
        Form::Log(_) => shard.logs.keep(slot),
    }
}

/// The one limit of `policy` when nothing else is kept beside its state:
/// not of requests in flight (its admissions carry a permit), no penalty
/// box, denials not counted. The case [`check_one`] and the memory
/// backend's lock-free path take.
#[inline]
pub(crate) fn lone_limit(policy: &Policy) -> Option<&Limit> {
    match (policy.limits(), policy.penalty(), policy.counts_denied()) {
        ([limit], None, false) if !limit.is_concurrent() => Some(limit),
        _ => None,
    }
}

/// Decide a request of `cost` under every limit of `policy` for the key
/// whose base hash is `base`: a ban first, then each limit, all or nothing;
/// commit when allowed (or when the policy counts denials), then strike a
/// denied key in the penalty box.
pub(crate) fn check<S, L, B>(
    shard: &mut Shard<S, L, B>,
    policy: &Policy,
    base: u64,
    cost: u32,
    now: Micros,
    at_capacity: AtCapacity,
) -> Decision
where
    S: Entries<State>,
    L: Entries<TimedLog>,
    B: Entries<Tat>,
{
    let limits = policy.limits();
    // Each limit's fingerprint, and its slot if the key is known.
    let mut found = [(0u64, None); MAX_LIMITS];
    for (f, limit) in found.iter_mut().zip(limits) {
        f.0 = fingerprint(base, limit.id());
    }
    let found = &mut found[..limits.len()];

    let penalty = policy.penalty().zip(policy.penalty_id());
    if let Some((penalty, id)) = penalty {
        if let Some(until) = shard.penalty(base, id).banned_until(penalty, now) {
            return Decision::banned(policy, until.saturating_sub(now));
        }
    }
    let mut decision = Decision::empty();
    for (f, limit) in found.iter_mut().zip(limits) {
        let (outcome, slot) = shard.check(limit, f.0, now, cost);
        f.1 = slot;
        decision.push(outcome);
    }
    decision.decide();

    let mut committed = false;
    if cost > 0 && (decision.is_allowed() || policy.counts_denied()) {
        let lacking = match at_capacity {
            AtCapacity::Deny => {
                let lacking = shard.lacks_room(limits, found, now);
                // Making room may have moved entries.
                shard.refind(limits, found);
                lacking
            }
            AtCapacity::EvictSoonestExpiring => None,
        }
        // Finds its slots again itself when it reclaims.
        .or_else(|| shard.lacks_log_bytes(limits, found, now));
        if let Some((index, retry_at)) = lacking {
            decision.exhaust_capacity(index, retry_at.saturating_sub(now));
        } else {
            // Known keys first, by slot; then new ones, whose insertion
            // may move other entries.
            for (&(_, slot), limit) in found.iter().zip(limits) {
                if let Some(slot) = slot {
                    shard.consume_at(limit, slot, now, cost);
                }
            }
            for (&(fp, slot), limit) in found.iter().zip(limits) {
                if slot.is_none() {
                    shard.consume_new(limit, fp, now, cost);
                }
            }
            committed = true;
            if policy.has_in_flight() {
                decision = decision.with_permit(now);
            }
        }
    }
    if !decision.is_allowed() {
        // Report what each limit holds now. A limit that denied already
        // reports that, unless the denial was counted; a limit that would
        // have allowed reported the state after a consumption that did
        // not happen. A limit that denied is kept at the cap.
        for (i, (&(fp, slot), limit)) in found.iter().zip(limits).enumerate() {
            let reported = decision.outcome(i).is_some_and(|o| o.is_allowed());
            if reported || committed {
                decision.report_state(i, shard.check(limit, fp, now, 0).0);
            }
            if !reported && cost > 0 {
                match slot {
                    // Nothing was inserted: the slot found is still its.
                    Some(slot) if !committed => keep(shard, limit, slot),
                    _ => shard.keep_denying(limit, fp),
                }
            }
        }
        // A strike is the client's own denial: not a peek, not a full table.
        let struck = cost > 0 && !decision.is_capacity_exhausted();
        if let Some((penalty, id)) = penalty.filter(|_| struck) {
            let mut state = shard.penalty(base, id);
            if let Some(ban) = state.strike(penalty, now) {
                decision.ban(ban);
            }
            shard.set_penalty(base, id, state, now);
        }
    }
    decision
}

/// A request counted at `reserved` that cost `actual`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settlement {
    pub(crate) reserved: u32,
    pub(crate) actual: u32,
}

/// A permit of a limit of requests in flight, taken at `taken` for
/// `cost`: given back, or renewed when `renew`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PermitChange {
    pub(crate) taken: Micros,
    pub(crate) cost: u32,
    pub(crate) renew: bool,
}

/// Correct a request counted at `reserved` to its `actual` cost: give the
/// difference back, or charge all of it, past each limit's capacity if need
/// be (the work is done; later requests wait the debt out). Permits are
/// given back when their request ends, not settled.
pub(crate) fn settle<S, L, B>(
    shard: &mut Shard<S, L, B>,
    policy: &Policy,
    base: u64,
    Settlement { reserved, actual }: Settlement,
    now: Micros,
) -> Decision
where
    S: Entries<State>,
    L: Entries<TimedLog>,
    B: Entries<Tat>,
{
    after_each(shard, policy, base, now, |shard, limit, fp| {
        if limit.is_concurrent() {
            // Given back when the request ends.
        } else if actual < reserved {
            shard.refund(limit, fp, now, reserved - actual);
        } else if actual > reserved {
            shard.charge(limit, fp, now, actual - reserved);
        }
    })
}

/// Give back (`renew`: false) or renew the permit taken at `permit` on each
/// limit of requests in flight.
pub(crate) fn permit<S, L, B>(
    shard: &mut Shard<S, L, B>,
    policy: &Policy,
    base: u64,
    PermitChange { taken, cost, renew }: PermitChange,
    now: Micros,
) -> Decision
where
    S: Entries<State>,
    L: Entries<TimedLog>,
    B: Entries<Tat>,
{
    let mut held = true;
    let decision = after_each(shard, policy, base, now, |shard, limit, fp| {
        let (true, Form::Log(log)) = (limit.is_concurrent(), limit.rule().form()) else {
            return;
        };
        let found = shard.logs.find(fp).is_some_and(|i| {
            shard.logs.at_mut(i).change(log, |log, s| {
                let found = log.release(s, now, taken, cost);
                if found && renew {
                    // Into the place the permit left: no growth.
                    log.consume(s, now, cost);
                }
                found
            })
        });
        held &= found;
    });
    if renew && held {
        decision.with_permit(now)
    } else {
        decision
    }
}

/// Forget the key's state under every limit of `policy` and its penalty box.
pub(crate) fn reset<S, L, B>(shard: &mut Shard<S, L, B>, policy: &Policy, base: u64)
where
    S: Entries<State>,
    L: Entries<TimedLog>,
    B: Entries<Tat>,
{
    for limit in policy.limits() {
        shard.forget(limit, fingerprint(base, limit.id()));
    }
    if let Some(id) = policy.penalty_id() {
        shard.forget_penalty(base, id);
    }
}

/// Run `change` on each limit's state, then report what each holds.
fn after_each<S, L, B>(
    shard: &mut Shard<S, L, B>,
    policy: &Policy,
    base: u64,
    now: Micros,
    mut change: impl FnMut(&mut Shard<S, L, B>, &Limit, u64),
) -> Decision
where
    S: Entries<State>,
    L: Entries<TimedLog>,
    B: Entries<Tat>,
{
    let mut decision = Decision::empty();
    for limit in policy.limits() {
        let fp = fingerprint(base, limit.id());
        change(shard, limit, fp);
        decision.push(shard.check(limit, fp, now, 0).0);
    }
    decision.decide();
    decision
}
