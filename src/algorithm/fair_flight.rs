//! A shared capacity of requests in flight (`FairShare::in_flight`'s
//! decision): at most `C` requests at once for every tenant together,
//! divided among the active tenants by weight. The Redis script
//! (`backend/redis/lua/fair_flight.lua`) makes the same decision step for
//! step; the conformance tests hold them to it.
//!
//! For a capacity of `C` requests in flight:
//! - a tenant is active while it has a request in flight or began or
//!   ended one within the last `active_for`; `Σw` is the active tenants'
//!   weights;
//! - a class may fill the capacity up to its threshold: critical all of
//!   it, default all but the critical reserve, sheddable all but both
//!   reserves (each at least 1); a tenant's share is of what its
//!   request's class may fill: `s = max(1, ⌊θ · w / Σw⌋)`;
//! - a tenant keeps the places it used within its share, and one more:
//!   its peak `p` is the most it had in flight within its share (or asked
//!   for, refused) in the last `active_for`; `k = min(p + 1, s)` (its
//!   share as of its last request), and `max(0, k − f_t)` is held for it
//!   (the one more lets a request that follows one just ended, or a
//!   tenant's first, find a place). `R` is what is held for all;
//! - a request is admitted when the requests in flight `f` are below its
//!   class's threshold `θ` and either its tenant has fewer than `s` in
//!   flight (within its share), or `f + R < θ` (a tenant over its share
//!   borrows only what nobody holds). So a hog never takes the place a
//!   light tenant's ended request leaves, and a tenant refused within its
//!   share gets the next place that ends;
//! - nothing admits more than `θ ≤ C`: the decision and the count are one
//!   step (a lock in memory, one script call on Redis).

use super::fair_share::{Ask, TenantId, Tenants, Verdict};

/// When a refused request may ask again, µs: places end at any moment.
pub(crate) const ASK_AGAIN_US: u64 = 10_000;

/// A capacity's numbers, fixed when it is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FlightSettings {
    /// `C`: requests in flight at once.
    pub capacity: u32,
    /// Each class's threshold of in flight: critical, default, sheddable.
    pub thresholds: [u32; 3],
    /// How long a tenant stays active after its last request began or
    /// ended, and keeps its peak, µs.
    pub active_for: u64,
    /// How many tenants are told apart; the rest share [`OVERFLOW`].
    pub max_tenants: usize,
    /// The percent of the capacity each class may fill, as given.
    pub fills: [u8; 3],
}

impl FlightSettings {
    /// `capacity` in flight, each class filling at most its percent
    /// (critical, default, sheddable).
    pub(crate) fn new(capacity: u32, fills: [u8; 3], max_tenants: usize) -> Self {
        let capacity = capacity.max(1);
        let fill =
            |percent: u8| (u64::from(capacity) * u64::from(percent.min(100)) / 100).max(1) as u32;
        Self {
            capacity,
            thresholds: fills.map(fill),
            active_for: 1_000_000,
            max_tenants: max_tenants.max(1),
            fills,
        }
    }
}

/// The requests in flight, each active tenant's, and the places held.
#[derive(Debug, Default)]
pub(crate) struct Flights {
    in_flight: u32,
    /// `R`: places held for tenants within their shares.
    held: u64,
    /// Seen when they began or ended a request.
    tenants: Tenants<Flier>,
}

/// What a tenant has in flight and keeps.
#[derive(Clone, Copy, Debug, Default)]
struct Flier {
    in_flight: u32,
    /// The most in flight within its share lately, and when it was last
    /// reached.
    peak: u32,
    peak_at: u64,
    /// Its share as of its last request.
    share: u32,
}

impl Flier {
    /// The places held for it: what it keeps (its peak and one more,
    /// within its share) less what it uses.
    fn held(&self) -> u64 {
        let keep = self.peak.saturating_add(1).min(self.share);
        u64::from(keep.saturating_sub(self.in_flight))
    }

    /// At `now`: a tenant using its peak holds it still; a peak not held
    /// for `active_for` falls to what it uses.
    fn settle(&mut self, now: u64, active_for: u64) {
        if self.in_flight >= self.peak {
            self.peak_at = now;
        } else if self.peak_at + active_for < now {
            self.peak = self.in_flight;
            self.peak_at = now;
        }
    }

    /// It reached `n` within its share.
    fn reached(&mut self, n: u32, now: u64) {
        if n >= self.peak {
            self.peak = n;
            self.peak_at = now;
        }
    }
}

impl Flights {
    /// Tenants active now.
    pub(crate) fn active(&self) -> usize {
        self.tenants.len()
    }

    /// Decide `ask`, counting it in flight if admitted. The tenant it was
    /// counted as comes back with the verdict: [`release`](Self::release)
    /// takes it.
    pub(crate) fn acquire(&mut self, settings: &FlightSettings, ask: Ask) -> (Verdict, TenantId) {
        let now = ask.now;
        let held = &mut self.held;
        self.tenants.expire(
            settings.active_for,
            now,
            |tenant| tenant.in_flight > 0,
            |tenant| *held -= tenant.own.held(),
        );
        let (id, mut member, active) = self.tenants.enter(&ask, settings.max_tenants);
        let tenant = &mut member.own;
        let was_held = tenant.held();
        tenant.settle(now, settings.active_for);

        let threshold = settings.thresholds[ask.class.min(2)];
        let share = u64::from(threshold) * u64::from(member.weight) / self.tenants.weights();
        let share = u32::try_from(share.max(1)).unwrap_or(u32::MAX);
        tenant.share = share;
        let within_share = tenant.in_flight < share;
        let others_hold = self.held - was_held;
        let admitted = self.in_flight < threshold
            && (within_share || u64::from(self.in_flight) + others_hold < u64::from(threshold));
        if admitted {
            self.in_flight += 1;
            tenant.in_flight += 1;
            if within_share {
                tenant.reached(tenant.in_flight, now);
            }
        } else if within_share {
            tenant.reached(tenant.in_flight + 1, now);
        }
        self.held = others_hold + tenant.held();
        self.tenants.put(id, member);
        let verdict = Verdict {
            admitted,
            share,
            retry_after: if admitted { 0 } else { ASK_AGAIN_US },
            active,
        };
        (verdict, id)
    }

    /// A request of `tenant` (as [`acquire`](Self::acquire) counted it)
    /// ended.
    pub(crate) fn release(&mut self, settings: &FlightSettings, tenant: TenantId, now: u64) {
        let Some(mut member) = self.tenants.get(&tenant) else {
            return;
        };
        let flier: &mut Flier = &mut member.own;
        let was_held = flier.held();
        flier.settle(now, settings.active_for);
        if flier.in_flight > 0 {
            flier.in_flight -= 1;
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        self.held = self.held - was_held + flier.held();
        self.tenants.touch(tenant, &mut member, now);
        self.tenants.put(tenant, member);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: usize = 1;

    fn ask(tenant: u8, weight: u32, now: u64) -> Ask {
        Ask {
            tenant: [tenant; 16],
            weight,
            class: DEFAULT,
            now,
        }
    }

    #[test]
    fn a_lone_hog_borrows_the_whole_part_of_its_class() {
        let settings = FlightSettings::new(10, [100, 80, 70], 100);
        let mut flights = Flights::default();
        let admitted = (0..20)
            .filter(|_| flights.acquire(&settings, ask(1, 1, 1)).0.admitted)
            .count();
        assert_eq!(admitted, 8, "80% of 10 for default requests");
    }

    #[test]
    fn a_tenant_keeps_the_places_it_used_and_gets_the_next_one_it_asked_for() {
        let settings = FlightSettings::new(10, [100, 100, 100], 100);
        let mut flights = Flights::default();
        // The light tenant had one request, ended: its place is held.
        let (_, light) = flights.acquire(&settings, ask(2, 1, 1));
        flights.release(&settings, light, 2);
        let mut hog = Vec::new();
        for _ in 0..20 {
            let (verdict, id) = flights.acquire(&settings, ask(1, 1, 3));
            if verdict.admitted {
                hog.push(id);
            }
        }
        assert_eq!(
            hog.len(),
            8,
            "its share, and all but the light tenant's two"
        );
        // Its two held places are its own.
        assert!(flights.acquire(&settings, ask(2, 1, 4)).0.admitted);
        assert!(flights.acquire(&settings, ask(2, 1, 4)).0.admitted);
        // Full: its third request is refused, and the next place that
        // ends is held for it, not the hog's.
        assert!(!flights.acquire(&settings, ask(2, 1, 5)).0.admitted);
        flights.release(&settings, hog.pop().unwrap(), 6);
        assert!(!flights.acquire(&settings, ask(1, 1, 7)).0.admitted);
        assert!(flights.acquire(&settings, ask(2, 1, 8)).0.admitted);
        assert_eq!(flights.in_flight, 10);
        // Unused for longer than active_for, the light tenant's peak
        // falls to what it uses, and the hog borrows again.
        for at in [9, 9, 9] {
            flights.release(&settings, light, at);
        }
        let later = 9 + settings.active_for + 1;
        flights.release(&settings, light, later);
        let hog_again = flights.acquire(&settings, ask(1, 1, later + 1)).0;
        assert!(hog_again.admitted);
    }

    #[test]
    fn idle_tenants_leave_but_not_while_in_flight() {
        let settings = FlightSettings::new(10, [100, 100, 100], 100);
        let mut flights = Flights::default();
        let (_, busy) = flights.acquire(&settings, ask(1, 3, 1));
        let (_, idle) = flights.acquire(&settings, ask(2, 1, 1));
        flights.release(&settings, idle, 2);
        let verdict = flights.acquire(&settings, ask(3, 1, 5_000_000)).0;
        assert_eq!(verdict.active, 2, "the busy one stays, the idle one left");
        assert_eq!(verdict.share, 2, "10 · 1 / (3 + 1)");
        flights.release(&settings, busy, 5_000_001);
        assert_eq!(flights.in_flight, 1);
        assert_eq!(
            flights.held, 3,
            "the busy one's ended request and one more; one more for the third"
        );
    }
}
