//! A shared capacity's decision (the `FairShare` layer's), in integer
//! microseconds: one global
//! GCRA for the capacity, one per active tenant at its weighted share, and
//! a depth per class. The Redis script (`backend/redis/lua/fair_share.lua`)
//! makes the same decision step for step; the conformance tests hold them
//! to it.
//!
//! For a capacity of `C` per window `W`:
//! - the capacity's emission interval is `T = ⌈W / C⌉` and its depth
//!   `D = max(T, W / 10)`: over any time `t` it admits at most
//!   `t / T + D / T` requests, whatever the classes and tenants;
//! - a tenant is active while it asked within the last `2 W` (at most
//!   [`EXPIRE_AT_ONCE`] expired tenants leave per decision); its share is
//!   `C · w / Σw` of the active tenants' weights, its interval
//!   `T_t = ⌈T · Σw / w⌉` and its depth `max(T_t, D / 2)`: the tenants'
//!   bursts within their shares fill at most half the capacity's depth
//!   together, so a tenant arriving beside a busy one finds room;
//! - a class may fill the capacity's depth up to its threshold: critical
//!   all of it, default all but the critical reserve, sheddable all but
//!   both reserves;
//! - a request is admitted when the capacity has room below its class's
//!   threshold and either its tenant is within its share, or the capacity
//!   is empty (a tenant over its share borrows what nobody uses at that
//!   moment, never what another is using).

use std::collections::{BTreeSet, HashMap};

/// At most this many expired tenants leave per decision: a bounded cost.
pub(crate) const EXPIRE_AT_ONCE: usize = 64;

/// A tenant's weight is at most this (larger ones count as it).
pub(crate) const MAX_WEIGHT: u32 = 1_000;

/// A tenant's interval is at most this, µs (35 years: a tenant whose
/// share rounds to nothing). Every number stays below 2^53, where the
/// Redis script's doubles are exact.
pub(crate) const MAX_TENANT_INTERVAL: u64 = 1 << 50;

/// The longest window a capacity may have: with [`MAX_WEIGHT`] it keeps
/// `interval · weight` exact in doubles.
pub(crate) const MAX_WINDOW_US: u64 = 86_400_000_000;

/// A tenant, as the capacity knows it: 16 bytes of a hash of its key.
pub(crate) type TenantId = [u8; 16];

/// The tenant every tenant past the cap is counted as.
pub(crate) const OVERFLOW: TenantId = [0xff; 16];

/// A capacity's numbers, fixed when it is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// `T`: µs between admissions at the full capacity.
    pub interval: u64,
    /// `D`: the capacity's depth, µs.
    pub depth: u64,
    /// How long a tenant stays active after it last asked, µs.
    pub active_for: u64,
    /// Each class's threshold of the depth, µs: critical, default,
    /// sheddable.
    pub thresholds: [u64; 3],
    /// How many tenants are told apart; the rest share [`OVERFLOW`].
    pub max_tenants: usize,
    /// The capacity per window, and the window in µs (for headers).
    pub limit: u32,
    pub window: u64,
}

impl Settings {
    /// `limit` per `window` µs, each class filling at most its percent of
    /// the depth (critical, default, sheddable).
    pub(crate) fn new(limit: u32, window: u64, fills: [u8; 3], max_tenants: usize) -> Self {
        let interval = window.div_ceil(u64::from(limit.max(1))).max(1);
        let depth = (window / 10).max(interval);
        let fill = |percent: u8| (depth * u64::from(percent.min(100)) / 100).max(interval);
        Self {
            interval,
            depth,
            active_for: window * 2,
            thresholds: fills.map(fill),
            max_tenants: max_tenants.max(1),
            limit,
            window,
        }
    }
}

/// What one request asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ask {
    pub tenant: TenantId,
    pub weight: u32,
    /// The request's class: its index in [`Settings::thresholds`]
    /// (0 critical, 1 default, 2 sheddable).
    pub class: usize,
    pub now: u64,
}

/// What was decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub admitted: bool,
    /// The tenant's share now, per window.
    pub share: u32,
    /// When a refused request could be admitted, µs from now.
    pub retry_after: u64,
    /// Tenants active now.
    pub active: u32,
}

/// A capacity's state: its own time of arrival, and each active
/// tenant's.
#[derive(Debug, Default)]
pub(crate) struct Shares {
    tat: u64,
    tenants: Tenants<u64>,
}

impl Shares {
    /// Tenants active now.
    pub(crate) fn active(&self) -> usize {
        self.tenants.len()
    }

    /// Decide `ask` and record it.
    pub(crate) fn decide(&mut self, settings: &Settings, ask: Ask) -> Verdict {
        let now = ask.now;
        self.tenants
            .expire(settings.active_for, now, |_| false, |_| {});
        let (id, mut tenant, active) = self.tenants.enter(&ask, settings.max_tenants);
        let (weight, weights) = (tenant.weight, self.tenants.weights());

        let tenant_interval = tenant_interval(settings.interval, weights, u64::from(weight));
        let tenant_depth = tenant_interval.max(settings.depth / 2);
        let threshold = settings.thresholds[ask.class.min(2)];
        let capacity_tat = self.tat.max(now) + settings.interval;
        let filled = capacity_tat - now;
        let tenant_tat = tenant.own.max(now) + tenant_interval;
        let within_share = tenant_tat - now <= tenant_depth;
        let share = (u64::from(settings.limit) * u64::from(weight) / weights).max(1);
        let share = u32::try_from(share).unwrap_or(u32::MAX);
        let (admitted, retry_after) = if filled > threshold {
            (false, filled - threshold)
        } else if within_share || filled <= settings.interval {
            (true, 0)
        } else {
            let over_share = tenant_tat - now - tenant_depth;
            (false, over_share.min(filled - settings.interval))
        };
        if admitted {
            self.tat = capacity_tat;
            // Borrowing leaves the tenant at most a full share behind.
            tenant.own = tenant_tat.min(now + tenant_depth);
        }
        self.tenants.put(id, tenant);
        Verdict {
            admitted,
            share,
            retry_after,
            active,
        }
    }
}

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
        mut left: impl FnMut(&T),
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
                    left(&member.own);
                    self.members.remove(&id);
                }
                None => {}
            }
        }
    }
}

/// `⌈interval · weights / weight⌉`, at most [`MAX_TENANT_INTERVAL`],
/// without a product past 2^53: `weights = q · weight + r`.
fn tenant_interval(interval: u64, weights: u64, weight: u64) -> u64 {
    let (q, r) = (weights / weight, weights % weight);
    if q >= MAX_TENANT_INTERVAL / interval {
        return MAX_TENANT_INTERVAL;
    }
    (interval * q + (interval * r).div_ceil(weight)).min(MAX_TENANT_INTERVAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000;

    const CRITICAL: usize = 0;
    const DEFAULT: usize = 1;
    const SHEDDABLE: usize = 2;

    fn ask(tenant: u8, weight: u32, class: usize, now: u64) -> Ask {
        Ask {
            tenant: [tenant; 16],
            weight,
            class,
            now,
        }
    }

    /// Admissions of each tenant over `seconds`, each asking at its own
    /// rate per second (evenly spaced).
    fn run(settings: &Settings, tenants: &[(u8, u32, usize, u64)], seconds: u64) -> Vec<u64> {
        let mut shares = Shares::default();
        let mut events: Vec<(u64, usize)> = Vec::new();
        for (i, &(_, _, _, rate)) in tenants.iter().enumerate() {
            for n in 0..rate * seconds {
                events.push((n * SECOND / rate + i as u64, i));
            }
        }
        events.sort();
        let mut admitted = vec![0; tenants.len()];
        for (at, i) in events {
            let (tenant, weight, class, _) = tenants[i];
            if shares
                .decide(settings, ask(tenant, weight, class, SECOND + at))
                .admitted
            {
                admitted[i] += 1;
            }
        }
        admitted
    }

    #[test]
    fn a_light_tenant_is_served_in_full_beside_a_hog() {
        let settings = Settings::new(200, SECOND, [100, 80, 70], 1000);
        let admitted = run(&settings, &[(1, 1, DEFAULT, 2000), (2, 1, DEFAULT, 20)], 10);
        assert_eq!(admitted[1], 200, "{admitted:?}");
        assert!(admitted[0] + admitted[1] <= 2000 + 20, "{admitted:?}");
        assert!(
            admitted[0] >= 1700,
            "the hog takes what is left: {admitted:?}"
        );
    }

    #[test]
    fn two_hogs_share_by_weight() {
        let settings = Settings::new(200, SECOND, [100, 80, 70], 1000);
        let admitted = run(
            &settings,
            &[(1, 4, DEFAULT, 2000), (2, 1, DEFAULT, 2000)],
            10,
        );
        let ratio = admitted[0] as f64 / admitted[1] as f64;
        assert!((3.2..=4.8).contains(&ratio), "{admitted:?}");
        assert!(admitted[0] + admitted[1] <= 2020, "{admitted:?}");
    }

    #[test]
    fn critical_requests_pass_sheddable_hogs() {
        let settings = Settings::new(200, SECOND, [100, 80, 70], 1000);
        let admitted = run(
            &settings,
            &[
                (1, 1, SHEDDABLE, 2000),
                (2, 1, SHEDDABLE, 2000),
                (3, 1, CRITICAL, 50),
            ],
            10,
        );
        assert_eq!(admitted[2], 500, "{admitted:?}");
        assert!(admitted.iter().sum::<u64>() <= 2020, "{admitted:?}");
    }

    #[test]
    fn huge_weights_and_many_tenants_stay_exact_and_never_overflow() {
        let settings = Settings::new(1, MAX_WINDOW_US, [100, 80, 70], 1_000_000);
        let mut shares = Shares::default();
        for tenant in 0..=255u8 {
            let verdict = shares.decide(&settings, ask(tenant, u32::MAX, DEFAULT, SECOND));
            assert!(verdict.share >= 1);
        }
        assert_eq!(shares.tenants.weights(), 256 * u64::from(MAX_WEIGHT));
        assert_eq!(
            tenant_interval(MAX_WINDOW_US, u64::MAX / 2, 1),
            MAX_TENANT_INTERVAL
        );
        assert_eq!(tenant_interval(5_000, 7, 2), 17_500);
        assert_eq!(tenant_interval(5_000, 7, 3), 11_667);
    }

    #[test]
    fn tenants_past_the_cap_share_one_place_and_idle_ones_leave() {
        let settings = Settings::new(200, SECOND, [100, 80, 70], 2);
        let mut shares = Shares::default();
        for tenant in 0..10 {
            shares.decide(&settings, ask(tenant, 1, DEFAULT, SECOND));
        }
        assert_eq!(shares.active(), 3, "two, and the overflow");
        shares.decide(&settings, ask(0, 1, DEFAULT, 4 * SECOND));
        assert_eq!(shares.active(), 1, "the idle ones left");
        assert_eq!(shares.tenants.weights(), 1);
    }
}
