//! The active tenants of a capacity, told apart up to a cap.

use std::collections::{BTreeSet, HashMap};

use super::Ask;

/// A tenant, as the capacity knows it: 16 bytes of a hash of its key.
pub(crate) type TenantId = [u8; 16];

/// The tenant every tenant past the cap is counted as.
pub(crate) const OVERFLOW: TenantId = [0xff; 16];

/// At most this many expired tenants leave per decision: a bounded cost.
pub(crate) const EXPIRE_AT_ONCE: usize = 64;

/// A tenant's weight is at most this (larger ones count as it).
pub(crate) const MAX_WEIGHT: u32 = 1_000;

/// A capacity's active tenants — the rate's (`Shares`, each tenant's own
/// state its time of arrival) and the capacity in flight's (`Flights`) —
/// with their weights' sum and who was seen longest ago (the first to
/// leave).
#[derive(Debug)]
pub(crate) struct Tenants<T> {
    members: HashMap<TenantId, Member<T>>,
    /// By when they were last seen.
    seen: BTreeSet<(u64, TenantId)>,
    weights: u64,
}

impl<T> Default for Tenants<T> {
    fn default() -> Self {
        Self {
            members: HashMap::new(),
            seen: BTreeSet::new(),
            weights: 0,
        }
    }
}

/// One active tenant: its weight, when it was last seen, and what its
/// capacity keeps for it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Member<T> {
    pub weight: u32,
    pub seen: u64,
    pub own: T,
}

impl<T: Copy + Default> Tenants<T> {
    /// Tenants active now.
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// The active tenants' weights together.
    pub(crate) fn weights(&self) -> u64 {
        self.weights
    }

    pub(crate) fn get(&self, id: &TenantId) -> Option<Member<T>> {
        self.members.get(id).copied()
    }

    /// `ask`'s tenant — [`OVERFLOW`] once `max` others are active — seen
    /// now at its weight (1 to [`MAX_WEIGHT`]): its id, its state (new if
    /// it was not active), and how many are active counting it. The state
    /// goes back with [`put`](Self::put).
    pub(crate) fn enter(&mut self, ask: &Ask, max: usize) -> (TenantId, Member<T>, u32) {
        let id = if self.members.contains_key(&ask.tenant) || self.members.len() < max {
            ask.tenant
        } else {
            OVERFLOW
        };
        let known = self.get(&id);
        let mut member = known.unwrap_or(Member {
            weight: 0,
            seen: ask.now,
            own: T::default(),
        });
        let weight = ask.weight.clamp(1, MAX_WEIGHT);
        self.weights = self.weights - u64::from(member.weight) + u64::from(weight);
        member.weight = weight;
        self.touch(id, &mut member, ask.now);
        let active = self.members.len() + usize::from(known.is_none());
        (id, member, u32::try_from(active).unwrap_or(u32::MAX))
    }

    pub(crate) fn put(&mut self, id: TenantId, member: Member<T>) {
        self.members.insert(id, member);
    }

    /// `member`, the tenant `id`, was seen at `now`.
    pub(crate) fn touch(&mut self, id: TenantId, member: &mut Member<T>, now: u64) {
        self.seen.remove(&(member.seen, id));
        member.seen = now;
        self.seen.insert((now, id));
    }

    /// Tenants not seen for more than `active_for` leave, oldest first, at
    /// most [`EXPIRE_AT_ONCE`]: each is handed to `left`, unless `stays`
    /// keeps it (seen again now).
    pub(crate) fn expire(
        &mut self,
        active_for: u64,
        now: u64,
        stays: impl Fn(&T) -> bool,
        mut left: impl FnMut(&Member<T>),
    ) {
        for _ in 0..EXPIRE_AT_ONCE {
            let Some(&(seen, id)) = self.seen.first() else {
                return;
            };
            if seen + active_for >= now {
                return;
            }
            self.seen.pop_first();
            match self.members.get_mut(&id) {
                Some(member) if stays(&member.own) => {
                    member.seen = now;
                    self.seen.insert((now, id));
                }
                Some(member) => {
                    self.weights -= u64::from(member.weight);
                    left(member);
                    self.members.remove(&id);
                }
                None => {}
            }
        }
    }
}
