//! A capacity's decision: the shares, the classes and the critical
//! reserve.

use super::counted::Counted;
use super::newcomers::{Newcomer, Pool};
use super::pace::{Demand, Pace};
use super::settings::Settings;
use super::tenants::Tenants;
use super::{Ask, Verdict};

/// A tenant's interval is at most this, µs (35 years: a tenant whose
/// share rounds to nothing). Every number stays below 2^53, where the
/// Redis script's doubles are exact.
pub(crate) const MAX_TENANT_INTERVAL: u64 = 1 << 50;

/// A tenant's own state: its time of arrival at its share (behind now by
/// what it keeps of its unused share), how far ahead of its share it
/// asks, and where it stands as a newcomer.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Own {
    tat: u64,
    demand: Demand,
    newcomer: Newcomer,
}

/// A capacity's state: its own time of arrival, the critical reserve's,
/// the critical requests it admitted past their shares, the newcomers'
/// place, and each active tenant's.
#[derive(Debug, Default)]
pub(crate) struct Shares {
    tat: u64,
    reserve_tat: u64,
    reserved: Counted,
    pool: Pool,
    tenants: Tenants<Own>,
}

impl Shares {
    /// Tenants active now.
    pub(crate) fn active(&self) -> usize {
        self.tenants.len()
    }

    /// Decide `ask` and record it.
    pub(crate) fn decide(&mut self, settings: &Settings, ask: Ask) -> Verdict {
        let now = ask.now;
        let pool = &mut self.pool;
        self.tenants.expire(
            settings.active_for,
            now,
            |_| false,
            |gone| pool.leave(&gone.own.newcomer),
        );
        let (id, mut tenant, active) = self.tenants.enter(&ask, settings.max_tenants);
        let weight = u64::from(tenant.weight);
        let own = &mut tenant.own;
        if self.pool.stand(settings, &mut own.newcomer, weight, now) {
            // A tenant of its own from now: no debt from its share as a
            // newcomer (how far ahead it asks stays).
            own.tat = now;
        }

        // The tenant's share: of the capacity over the established
        // tenants and the newcomers' place, and of that place over its
        // newcomers.
        let place = self.pool.weight(now, settings.window);
        let top = self.tenants.weights() - self.pool.weights() + place;
        let (shared, limit) = self.shared(settings, now);
        let pooled = own.newcomer.pooled();
        let (interval, share) = if pooled {
            (
                tenant_interval(shared, top * self.pool.weights(), place * weight),
                limit * place / top * weight / self.pool.weights(),
            )
        } else {
            (tenant_interval(shared, top, weight), limit * weight / top)
        };
        let share = u32::try_from(share.max(1)).unwrap_or(u32::MAX);
        // How far ahead of its share it asks is counted over two of its
        // intervals, and its GCRA's tolerance is as long.
        let depth = 2 * interval;
        // A tenant of its own keeps its unused share (the time its GCRA
        // stood empty) up to the headroom's requests at its interval.
        let behind = match pooled {
            true => 0,
            false => settings.kept_requests() * interval,
        };
        let pace = Pace::new(interval, depth, own.tat, now, behind);
        let ahead = own
            .demand
            .ask(interval, depth, now, pooled && self.pool.crowded());
        let reserve = Pace::new(
            settings.reserve_interval,
            settings.reserve_depth,
            self.reserve_tat,
            now,
            0,
        );
        let in_reserve =
            ask.class == 0 && !pace.within && settings.reserve_interval > 0 && reserve.within;
        // Where the request must find room (see the module's guarantee).
        let class = ask.class.min(2);
        let threshold = if in_reserve {
            settings.thresholds[class]
        } else if pace.within {
            settings.thresholds[class].saturating_sub(ahead.room(settings, pace.unused()))
        } else {
            settings.thresholds[class].saturating_sub(settings.headroom * 3 / 2)
        }
        .max(settings.interval);
        let capacity_tat = self.tat.max(now) + settings.interval;
        let filled = capacity_tat - now;
        let admitted = filled <= threshold;
        if admitted {
            self.tat = capacity_tat;
            if in_reserve {
                // Paid by the reserve, not by the tenant's share: were it
                // both, every critical request past the share would keep
                // the share spent, and all of them would count out of the
                // others' shares.
                self.reserve_tat = reserve.tat;
                self.reserved
                    .count(now, settings.window * settings.reserved_windows());
            } else {
                // Borrowing leaves a tenant at most a full share behind.
                own.tat = pace.kept();
            }
        } else if pace.within {
            // Refused within its share, a tenant loses an interval of
            // what it kept: refused the share it asked for, it keeps
            // none of it.
            own.tat = pace.refused(interval);
        }
        self.tenants.put(id, tenant);
        Verdict {
            admitted,
            share,
            retry_after: filled.saturating_sub(threshold),
            active,
        }
    }

    /// What the shares divide: the capacity less the critical requests it
    /// admitted past their shares, per window over the last
    /// [`Settings::reserved_windows`] (`r`, at most half the capacity), as
    /// an interval (`⌈W / (C − r)⌉`, `T` while `r` is 0) and whole
    /// requests per window. Those requests take capacity
    /// from the others; counted out of every share, they are lost by each
    /// tenant in proportion to its weight, not by whichever meets a full
    /// capacity.
    fn shared(&self, settings: &Settings, now: u64) -> (u64, u64) {
        let limit = u64::from(settings.limit) * 1024;
        let windows = settings.reserved_windows();
        let reserved =
            (self.reserved.last_window(now, settings.window * windows) / windows).min(limit / 2);
        if reserved == 0 {
            return (settings.interval, limit / 1024);
        }
        let interval = (settings.window * 1024).div_ceil(limit - reserved);
        (interval.max(settings.interval), (limit - reserved) / 1024)
    }
}

/// `⌈interval · weights / weight⌉`, at most [`MAX_TENANT_INTERVAL`],
/// without a product past 2^53 (`weight` below 2^26): `weights = q ·
/// weight + r` and `interval = a · weight + b`, so `interval · r / weight
/// = a · r + b · r / weight`.
fn tenant_interval(interval: u64, weights: u64, weight: u64) -> u64 {
    let (q, r) = (weights / weight, weights % weight);
    if q >= MAX_TENANT_INTERVAL / interval {
        return MAX_TENANT_INTERVAL;
    }
    let (a, b) = (interval / weight, interval % weight);
    (interval * q + a * r + (b * r).div_ceil(weight)).min(MAX_TENANT_INTERVAL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::fair_share::newcomers::SMALL_POOL;
    use crate::algorithm::fair_share::settings::MAX_WINDOW_US;
    use crate::algorithm::fair_share::tenants::MAX_WEIGHT;

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

    /// A client of the capacity: `ids` tenant ids it takes in turn, its
    /// weight and class, and how many requests a second it asks (evenly
    /// spaced from a phase at random, each moved by up to a tenth of the
    /// spacing at random, unless played otherwise).
    #[derive(Clone, Copy)]
    struct Client {
        ids: u32,
        weight: u32,
        class: usize,
        per_second: f64,
        /// When it starts and stops, s (`None`: at the end).
        from: f64,
        until: Option<f64>,
        /// Whose ids it takes (`None`: its own).
        ids_of: Option<u32>,
        /// From when its requests are counted, s.
        counted_from: f64,
    }

    fn client(per_second: f64) -> Client {
        Client {
            ids: 1,
            weight: 1,
            class: DEFAULT,
            per_second,
            from: 0.0,
            until: None,
            ids_of: None,
            counted_from: 0.0,
        }
    }

    /// The tests' random numbers: one step of a 64-bit LCG (`state`
    /// becomes the next number), repeatable from a seed.
    fn next_random(state: &mut u64) {
        *state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
    }

    /// `events` (time, tenant) decided in order, each tenant `t` of weight
    /// `weight(t)`, in the default class: of `watched`'s requests from
    /// `from` on, how many were refused and how many asked.
    fn refused_of(
        settings: &Settings,
        mut events: Vec<(u64, u8)>,
        weight: impl Fn(u8) -> u32,
        watched: u8,
        from: u64,
    ) -> (u64, u64) {
        events.sort_unstable();
        let mut shares = Shares::default();
        let (mut asked, mut refused) = (0u64, 0u64);
        for (now, tenant) in events {
            let verdict = shares.decide(settings, ask(tenant, weight(tenant), DEFAULT, now));
            if tenant == watched && now >= from {
                asked += 1;
                refused += u64::from(!verdict.admitted);
            }
        }
        (refused, asked)
    }

    /// At most 1% of `seen` refused.
    fn at_most_one_percent((admitted, refused): (u64, u64)) -> bool {
        refused * 100 <= admitted + refused
    }

    /// Each client's (admitted, refused) over `seconds`.
    fn play(settings: &Settings, clients: &[Client], seconds: u64) -> Vec<(u64, u64)> {
        play_seeded(settings, clients, seconds, 0x9e37_79b9_7f4a_7c15, 10.0)
    }

    /// [`play`] from the random numbers' `seed`, each request moved by up
    /// to `1 / jitter` of its spacing.
    fn play_seeded(
        settings: &Settings,
        clients: &[Client],
        seconds: u64,
        seed: u64,
        jitter: f64,
    ) -> Vec<(u64, u64)> {
        let mut shares = Shares::default();
        let mut events: Vec<(u64, usize, u32)> = Vec::new();
        let mut random = seed;
        for (c, client) in clients.iter().enumerate() {
            let spacing = SECOND as f64 / client.per_second;
            let until = client.until.unwrap_or(seconds as f64).min(seconds as f64);
            let count = (client.per_second * (until - client.from)) as u64;
            let mut uniform = || {
                next_random(&mut random);
                (random >> 33) as f64 / f64::from(1u32 << 31)
            };
            let phase = client.from * SECOND as f64 + uniform() * spacing;
            for n in 0..count {
                let moved = uniform() * spacing / jitter;
                let at = (phase + n as f64 * spacing + moved) as u64;
                // Clients taking one set of ids start at different ones.
                let id = (n + 25 * c as u64) % u64::from(client.ids);
                events.push((at, c, id as u32));
            }
        }
        events.sort();
        let mut seen = vec![(0, 0); clients.len()];
        for (at, c, id) in events {
            let client = clients[c];
            let mut tenant = [0; 16];
            tenant[..4].copy_from_slice(&client.ids_of.unwrap_or(c as u32).to_le_bytes());
            tenant[4..8].copy_from_slice(&id.to_le_bytes());
            let ask = Ask {
                tenant,
                weight: client.weight,
                class: client.class,
                now: SECOND + at,
            };
            let v = shares.decide(settings, ask);
            if (at as f64) < client.counted_from * SECOND as f64 {
                continue;
            }
            if v.admitted {
                seen[c].0 += 1;
            } else {
                seen[c].1 += 1;
            }
        }
        seen
    }

    fn capacity(per_second: u32) -> Settings {
        Settings::new(per_second, SECOND, [100, 80, 70], 10_000)
    }

    /// At most `t / T + D / T` admitted over the run.
    fn assert_within_capacity(settings: &Settings, seen: &[(u64, u64)], seconds: u64) {
        let admitted: u64 = seen.iter().map(|s| s.0).sum();
        let most = (seconds * SECOND + settings.depth) / settings.interval + 1;
        assert!(
            admitted <= most,
            "{admitted} admitted, at most {most}: {seen:?}"
        );
    }

    #[test]
    fn a_light_tenant_is_served_in_full_beside_a_hog() {
        let settings = capacity(200);
        let seen = play(&settings, &[client(2000.0), client(20.0)], 10);
        assert_eq!(seen[1], (200, 0), "{seen:?}");
        assert_within_capacity(&settings, &seen, 10);
        assert!(seen[0].0 >= 1700, "the hog takes what is left: {seen:?}");
    }

    /// A tenant of weight 1 asking 13 times its share beside seven of
    /// weights 3 to 9 asking 1.4 to 4 times theirs and two newcomers
    /// asking once every 2.2 s (each time new, so served past the
    /// newcomers' place), at 5/s, 20/s and 200/s: the newcomers take more
    /// than the place's share, and the tenant asking furthest past its
    /// share must still get 90% of it (at 20/s it got 50–85% while its
    /// requests within its share came after the others', however long it
    /// had waited).
    #[test]
    fn a_tenant_far_past_its_share_keeps_it_beside_tenants_less_far_past() {
        for per_second in [5u32, 20, 200] {
            let settings = capacity(per_second);
            let mut clients: Vec<Client> = [8u32, 7, 1, 3, 8, 6, 9, 7]
                .iter()
                .map(|&weight| Client {
                    weight,
                    counted_from: 4.0,
                    ..client(f64::from(per_second) / 4.0)
                })
                .collect();
            clients.extend(vec![
                Client {
                    counted_from: 4.0,
                    ..client(1.0 / 2.2)
                };
                2
            ]);
            let share = f64::from(per_second) / 51.0 * 96.0;
            for seed in [1u64, 2, 3, 7] {
                let seen = play_seeded(&settings, &clients, 100, seed, 5.0);
                assert!(
                    seen[2].0 as f64 >= 0.9 * share,
                    "{per_second}/s, seed {seed}: {seen:?}"
                );
                assert_within_capacity(&settings, &seen, 100);
            }
        }
    }

    #[test]
    fn two_hogs_share_by_weight() {
        let settings = capacity(200);
        let pro = Client {
            weight: 4,
            ..client(2000.0)
        };
        let seen = play(&settings, &[pro, client(2000.0)], 10);
        let ratio = seen[0].0 as f64 / seen[1].0 as f64;
        assert!((3.2..=4.8).contains(&ratio), "{seen:?}");
        assert_within_capacity(&settings, &seen, 10);
    }

    /// Two hogs of weights 4 and 1 whose requests come in bursts (a
    /// client's connections paced alike) share by weight whatever the
    /// bursts' spacing: 4.0, 3.9 and 3.9 to 1 at 5, 10 and 15 ms. Keeping
    /// nothing of a tenant's unused share past its GCRA's two intervals
    /// (12.5 ms for the pro at 200/s), bursts further apart lose part of
    /// it, and a request past its share takes what is lost: 4.0, 3.0, 2.1.
    #[test]
    fn two_hogs_asking_in_bursts_share_by_weight() {
        let settings = capacity(200);
        for spacing_ms in [5u64, 10, 15] {
            let mut shares = Shares::default();
            let mut admitted = [0u64; 2];
            let mut random = 0x9e37_79b9_7f4a_7c15u64;
            for burst in 0..10_000 / spacing_ms {
                let at = SECOND + burst * spacing_ms * 1_000;
                // Twelve requests 20 µs apart, each the pro's or the
                // free's at random.
                for n in 0..12 {
                    next_random(&mut random);
                    let free = (random >> 40) & 1;
                    let mut tenant = [0; 16];
                    tenant[0] = free as u8;
                    let ask = Ask {
                        tenant,
                        weight: if free == 0 { 4 } else { 1 },
                        class: DEFAULT,
                        now: at + n * 20,
                    };
                    admitted[free as usize] += u64::from(shares.decide(&settings, ask).admitted);
                }
            }
            let ratio = admitted[0] as f64 / admitted[1] as f64;
            assert!(
                (3.2..=4.8).contains(&ratio),
                "bursts {spacing_ms} ms apart: {ratio:.2}, {admitted:?}"
            );
        }
    }

    /// Hogs of weights 4 and 1 asking 1.5 times their shares (240/s and
    /// 60/s at 200/s) on 6 connections each, paced alike: 6 requests
    /// together every 25 ms and every 100 ms, each group moved by up to 5
    /// ms at random, as over HTTP. The free one keeps 90% of its share and
    /// the weights hold (396 of 400, 4.1 to 1). Its bursts come further
    /// apart than its GCRA's tolerance (`2 T_t` = 50 ms): keeping nothing
    /// of its unused share below that, it got 244 of 400, 7.2 to 1.
    #[test]
    fn hogs_a_little_past_their_shares_on_six_connections_keep_them() {
        let settings = capacity(200);
        let mut shares = Shares::default();
        let mut events: Vec<(u64, u8)> = Vec::new();
        let mut random = 0x9e37_79b9_7f4a_7c15u64;
        for (tenant, spacing, offset) in [(0u8, 25_000u64, 0u64), (1, 100_000, 12_300)] {
            let mut at = SECOND + offset;
            while at < 11 * SECOND {
                next_random(&mut random);
                let moved = (random >> 33) % 5_000;
                events.extend((0..6).map(|n| (at + moved + n * 20, tenant)));
                at += spacing;
            }
        }
        events.sort_unstable();
        let mut admitted = [0u64; 2];
        for (now, tenant) in events {
            let weight = if tenant == 0 { 4 } else { 1 };
            let verdict = shares.decide(&settings, ask(tenant, weight, DEFAULT, now));
            admitted[usize::from(tenant)] += u64::from(verdict.admitted);
        }
        let ratio = admitted[0] as f64 / admitted[1] as f64;
        assert!(admitted[1] >= 360, "{admitted:?}");
        assert!((3.2..=4.8).contains(&ratio), "{ratio:.2}: {admitted:?}");
    }

    /// A light tenant whose requests come at random (a Poisson stream at
    /// half and at 70% of its share, weights 4, 1 and 1) beside two hogs
    /// asking 1.5 times their shares in bursts of six: refused at most 1%.
    /// Today at half its share, none of 15, 78, 962 and 4,954 at 5/s,
    /// 20/s, 200/s and 1000/s; at 70%, at most 4 of 1,354 (200/s).
    /// Keeping nothing of its unused share below its GCRA's tolerance, it
    /// was refused 2.6% at 20/s and 3.6% at 200/s at half its share;
    /// spending what it kept below `θ − H` instead of `θ − H / 2`, 16 of
    /// 1,354 at 70%; keeping half as many requests, 28.
    #[test]
    fn a_light_tenant_asking_at_random_within_its_share_is_served() {
        for (per_second, part) in [5u32, 20, 200, 1000]
            .into_iter()
            .flat_map(|c| [(c, 0.5), (c, 0.7)])
        {
            let settings = capacity(per_second);
            let share = f64::from(per_second) / 6.0;
            let mut events: Vec<(u64, u8)> = Vec::new();
            for (tenant, weight) in [(0u8, 4.0), (1, 1.0)] {
                let spacing = (6.0 / (1.5 * weight * share) * SECOND as f64) as u64;
                let mut at = SECOND + u64::from(tenant) * 12_300;
                while at < 61 * SECOND {
                    events.extend((0..6).map(|n| (at + n * 20, tenant)));
                    at += spacing;
                }
            }
            let mut random = 0x2545_f491_4f6c_dd1du64;
            let mut at = SECOND as f64;
            while at < (61 * SECOND) as f64 {
                next_random(&mut random);
                let uniform = ((random >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
                at += -uniform.ln() / (share * part) * SECOND as f64;
                events.push((at as u64, 2));
            }
            let weight = |tenant| if tenant == 0 { 4 } else { 1 };
            let (refused, asked) = refused_of(&settings, events, weight, 2, 3 * SECOND);
            assert!(
                refused * 100 <= asked,
                "{per_second}/s at {part} of its share: {refused} of {asked} refused"
            );
        }
    }

    /// Ten tenants each asking 90% of its share in bursts of eight, and a
    /// light tenant asking 95% of its share evenly (weights 1, at 5/s,
    /// 20/s, 200/s and 1000/s): the light tenant, asking within its share,
    /// comes before the bursts' requests spending what their tenants
    /// kept, and is refused at most 1% (none of 34, 138, 1,382 and 6,910).
    /// Were those requests as far up as its own (room below `θ`), it was
    /// refused 1.4% at 200/s (19 of 1,382).
    #[test]
    fn a_light_tenant_comes_before_tenants_spending_what_they_kept() {
        for per_second in [5u32, 20, 200, 1000] {
            let settings = capacity(per_second);
            let share = f64::from(per_second) / 11.0;
            let mut events: Vec<(u64, u8)> = Vec::new();
            let mut random = 0x9e37_79b9_7f4a_7c15u64;
            for tenant in 0..10u8 {
                let spacing = (8.0 / (0.9 * share) * SECOND as f64) as u64;
                next_random(&mut random);
                let mut at = SECOND + (random >> 11) % spacing;
                while at < 91 * SECOND {
                    events.extend((0..8).map(|n| (at + n * 20, tenant)));
                    at += spacing;
                }
            }
            let spacing = (SECOND as f64 / (0.95 * share)) as u64;
            events.extend(
                (0..)
                    .map(|n| (SECOND + 3_000 + n * spacing, 10))
                    .take_while(|e| e.0 < 91 * SECOND),
            );
            let (refused, asked) = refused_of(&settings, events, |_| 1, 10, 11 * SECOND);
            assert!(
                refused * 100 <= asked,
                "{per_second}/s: {refused} of {asked} refused"
            );
        }
    }

    /// A hog that took what a light tenant left of its share owes nothing
    /// for it: once a second hog comes, each hog gets at least 90% of its
    /// share, a third of the capacity. At 200/s after 10 s, over the next
    /// 9 s; at 5/s after 40 s, over the next 39 s (with its debt
    /// unbounded, the first got 167 of 600 at 200/s, 14 of 65 at 5/s).
    #[test]
    fn borrowing_idle_capacity_costs_nothing_later() {
        for (per_second, borrowed, light) in [(200u32, 10.0, 2.0), (5, 40.0, 0.2)] {
            let settings = capacity(per_second);
            let c = f64::from(per_second);
            let first = Client {
                counted_from: borrowed + 1.0,
                ..client(10.0 * c)
            };
            let second = Client {
                from: borrowed,
                counted_from: borrowed + 1.0,
                ..client(10.0 * c)
            };
            let seconds = 2 * borrowed as u64;
            let seen = play(&settings, &[first, second, client(light)], seconds);
            let floor = 0.9 * c / 3.0 * (borrowed - 1.0);
            for (admitted, _) in &seen[..2] {
                assert!(*admitted as f64 >= floor, "{per_second}/s: {seen:?}");
            }
            assert_within_capacity(&settings, &seen, seconds);
        }
    }

    /// RELIABILITY's "Not done yet": more than 16 tenants arriving
    /// together, as after a restart of a server keeping the capacity in
    /// memory. 20 or 100 tenants each asking 80% of its share beside 2
    /// hogs at 200/s (and 20 at 20/s) stay newcomers, sharing one place
    /// that grows by one every 8 windows: the figures are printed for
    /// RELIABILITY (`--nocapture`), and what is held is that once the
    /// place has grown the crowd is refused at most 1% (from 200 s on, of
    /// 300). A place that never grows: 7,867 of 14,531 refused then.
    #[test]
    fn a_crowd_past_sixteen_arriving_together_is_served_once_the_place_grew() {
        for (per_second, n) in [(200u32, 20usize), (200, 100), (20, 20)] {
            let settings = capacity(per_second);
            let c = f64::from(per_second);
            let crowd = |counted_from| {
                let mut clients = vec![client(1.5 * c); 2];
                clients.extend(vec![
                    Client {
                        counted_from,
                        ..client(0.8 * c / (n + 2) as f64)
                    };
                    n
                ]);
                clients
            };
            let refused = |seconds, counted_from| {
                let seen = play_seeded(&settings, &crowd(counted_from), seconds, 7, 5.0);
                let asked: u64 = seen[2..].iter().map(|s| s.0 + s.1).sum();
                (seen[2..].iter().map(|s| s.1).sum::<u64>(), asked)
            };
            for seconds in [10, 60] {
                let (refused, asked) = refused(seconds, 0.0);
                println!(
                    "{per_second}/s, {n} tenants at 80% of their shares beside 2 hogs, \
                     the first {seconds} s: {refused} of {asked} refused"
                );
            }
            let (late, asked) = refused(300, 200.0);
            println!("  after 200 s of 300: {late} of {asked} refused");
            assert!(
                late * 100 <= asked,
                "{per_second}/s, {n}: {late} of {asked} after 200 s"
            );
        }
    }

    /// Trusted tenants (`FairShare::trusted_tenants`) have no newcomers'
    /// place: the crowds of
    /// `a_crowd_past_sixteen_arriving_together_is_served_once_the_place_grew`
    /// (20 and 100 tenants at 80% of their shares beside 2 hogs arriving
    /// together at 200/s, 20 at 20/s), which untrusted lose 695 of 1,440,
    /// 740 of 1,500 and 58 of 140 requests in their first 10 s, and 20 at
    /// 5/s, are refused at most 1% from the start; and made-up ids are
    /// tenants.
    #[test]
    fn trusted_tenants_arriving_together_are_served_at_once() {
        for (per_second, n) in [(200u32, 20usize), (200, 100), (20, 20), (5, 20)] {
            let settings = Settings {
                trusted: true,
                ..capacity(per_second)
            };
            let c = f64::from(per_second);
            let mut clients = vec![client(1.5 * c); 2];
            clients.extend(vec![client(0.8 * c / (n + 2) as f64); n]);
            let seen = play_seeded(&settings, &clients, 10, 7, 5.0);
            let refused: u64 = seen[2..].iter().map(|s| s.1).sum();
            let asked: u64 = seen[2..].iter().map(|s| s.0 + s.1).sum();
            assert!(
                refused * 100 <= asked,
                "{per_second}/s, {n}: {refused} of {asked} refused"
            );
            assert_within_capacity(&settings, &seen, 10);
        }
        // 200 made-up ids at 700/s beside a light tenant asking 20/s: each
        // id is a tenant, and the light tenant's share falls to 200/201 a
        // second (40 of 280 admitted; untrusted, all but 1%).
        let settings = Settings {
            trusted: true,
            ..capacity(200)
        };
        let flood = Client {
            ids: 200,
            from: 2.0,
            ..client(700.0)
        };
        let seen = play(&settings, &[flood, client(20.0)], 14);
        assert!(seen[1].0 * 4 < seen[1].0 + seen[1].1, "{seen:?}");
    }

    /// The guide's promise: critical requests within the critical reserve
    /// (20% of 200/s) are never refused while sheddable or default ones
    /// are admitted, for any number of sheddable or default tenants: hogs
    /// (about 710/s together), or default tenants each asking its whole
    /// share (the capacity together).
    #[test]
    fn critical_requests_within_the_reserve_pass_any_number_of_tenants() {
        let settings = capacity(200);
        for (class, together) in [(SHEDDABLE, 710.0), (DEFAULT, 710.0), (DEFAULT, 200.0)] {
            for tenants in [2, 10, 20, 50] {
                let hog = Client {
                    class,
                    ..client(together / f64::from(tenants + 1))
                };
                let critical = Client {
                    class: CRITICAL,
                    ..client(20.0)
                };
                let mut clients = vec![hog; tenants as usize];
                clients.push(critical);
                let seen = play(&settings, &clients, 6);
                let (admitted, refused) = seen[tenants as usize];
                assert_eq!(refused, 0, "{tenants} tenants of class {class}: {seen:?}");
                assert_eq!(admitted, 120);
                assert_within_capacity(&settings, &seen, 6);
                let others: u64 = seen[..tenants as usize].iter().map(|s| s.0).sum();
                let asked = together * f64::from(tenants) / f64::from(tenants + 1) * 6.0;
                let rest = asked.min(1200.0 - 120.0) * 0.85;
                assert!(others as f64 >= rest, "the others take the rest: {seen:?}");
            }
        }
    }

    /// A light tenant at 20/s, then one client asking 700/s under 200,
    /// 1,000 or 5,000 made-up tenant ids: the made-up ids share the
    /// newcomers' place, the light tenant keeps what it asks. One arriving
    /// with the flood is one of the newcomers only until it has asked
    /// `BUSY_SAMPLE` times (at most its first half window).
    #[test]
    fn made_up_tenants_dilute_nobody() {
        let settings = capacity(200);
        for ids in [200, 1_000, 5_000] {
            let flood = Client {
                ids,
                from: 2.0,
                ..client(700.0)
            };
            let arriving = Client {
                from: 2.0,
                ..client(20.0)
            };
            let seen = play(&settings, &[flood, client(20.0), arriving], 14);
            let (admitted, refused) = seen[1];
            assert!(
                refused * 100 <= admitted + refused,
                "{ids} made-up ids: {seen:?}"
            );
            assert!(seen[2].1 <= 10, "{ids} made-up ids: {seen:?}");
            assert_within_capacity(&settings, &seen, 14);
        }
    }

    /// A light tenant asking a tenth of the capacity beside made-up ids
    /// arriving twelve at a time (a place small enough to graduate from),
    /// five times a second, each asking a fifth of the capacity for a
    /// fifth of a window and never again: none stays the quarter window a
    /// newcomer waits to graduate, so none takes a share of its own. At
    /// 5/s to 1000/s; at 200/s, graduating after an eighth refuses the
    /// light tenant 17 of 240.
    #[test]
    fn made_up_tenants_gone_within_a_quarter_window_dilute_nobody() {
        for per_second in [5u32, 20, 200, 1000] {
            let settings = capacity(per_second);
            let c = f64::from(per_second);
            let mut clients = vec![client(c / 10.0)];
            for wave in 0..40 {
                let from = 2.0 + 0.2 * f64::from(wave);
                clients.push(Client {
                    ids: 12,
                    from,
                    until: Some(from + 0.2),
                    ..client(2.4 * c)
                });
            }
            let mut seen = play(&settings, &clients, 12);
            let light = seen.remove(0);
            assert!(at_most_one_percent(light), "{per_second}/s: {light:?}");
        }
    }

    /// The same flood through limits per client address that let each of
    /// its 8 addresses send 100 requests at once, then 100 a second: the
    /// 200 ids, silent for a second, come back with their shares unused.
    #[test]
    fn made_up_tenants_in_bursts_dilute_nobody() {
        let settings = capacity(200);
        let mut clients = vec![Client {
            from: 1.0,
            ..client(20.0)
        }];
        for _ in 0..8 {
            // 100 within 3 ms, then 100 a second from the next second.
            clients.push(Client {
                ids: 200,
                from: 2.0,
                until: Some(2.003),
                ids_of: Some(1),
                ..client(33_334.0)
            });
            clients.push(Client {
                ids: 200,
                from: 3.0,
                ids_of: Some(1),
                ..client(100.0)
            });
        }
        let mut seen = play(&settings, &clients, 8);
        let light = seen.remove(0);
        assert!(at_most_one_percent(light), "{light:?} {seen:?}");
    }

    /// A tenant asking its weighted share (weights 1, beside 1, 10 or 50
    /// hogs each asking three times the capacity's part, arriving once
    /// they are there) is refused at most 1% from a quarter window after
    /// it came, at every capacity from 1/s; one asking a tenth of it,
    /// never.
    #[test]
    fn light_tenants_are_served_at_every_capacity() {
        for per_second in [1u32, 5, 20, 200, 5_000] {
            let settings = capacity(per_second);
            for hogs in [1u32, 10, 50] {
                let seconds = if per_second < 20 { 120 } else { 12 };
                let share = f64::from(per_second) / f64::from(hogs + 2);
                let hog = client(3.0 * f64::from(per_second).max(10.0) / f64::from(hogs));
                let mut clients = vec![hog; hogs as usize];
                let from = 2.0;
                // Counted from its first quarter window's end, as the
                // guarantee is: before, a newcomer loses at most what it
                // asks past the newcomers' place (the test below).
                clients.push(Client {
                    from,
                    counted_from: from + 0.25,
                    ..client(share)
                });
                clients.push(Client {
                    from,
                    ..client(share / 10.0)
                });
                let seen = play(&settings, &clients, seconds);
                let at_share = seen[hogs as usize];
                let trickle = seen[hogs as usize + 1];
                assert!(
                    at_share.1 * 100 <= at_share.0 + at_share.1,
                    "{per_second}/s, {hogs} hogs, at its share: {at_share:?} {seen:?}"
                );
                assert_eq!(
                    trickle.1, 0,
                    "{per_second}/s, {hogs} hogs, a trickle: {seen:?}"
                );
                assert_within_capacity(&settings, &seen, seconds);
            }
        }
    }

    /// The smallest capacities' newcomers: at 20/s, two hogs asking 150 to
    /// 320/s each (as two over HTTP do), and tenants asking 4/s (80% of
    /// their share of a quarter) and 0.75/s arriving together once the
    /// hogs are there, each request moved by up to a fifth of its spacing:
    /// over 300 runs the light tenants are never refused, as newcomers
    /// either; nor at 5/s and 20/s beside 2 or 10 hogs. Hogs admitted within their shares used to count as asking
    /// their shares and fill the headroom's last third a newcomer's
    /// request needs room below: 3 of these runs refused one.
    #[test]
    fn light_newcomers_are_served_beside_hogs_at_small_capacities() {
        let settings = capacity(20);
        let mut refused = Vec::new();
        for run in 0..300u64 {
            let hog = |per_second| client(150.0 + (run * per_second % 171) as f64);
            let later = |c: Client| Client { from: 1.0, ..c };
            let clients = [hog(7), hog(13), later(client(4.0)), later(client(0.75))];
            let seed = 0x9e37_79b9_7f4a_7c15 ^ run.wrapping_mul(0x1234_5678_9abc);
            let seen = play_seeded(&settings, &clients, 12, seed, 5.0);
            assert_within_capacity(&settings, &seen, 12);
            if seen[2].1 + seen[3].1 > 0 {
                refused.push((run, seen));
            }
        }
        assert!(
            refused.is_empty(),
            "{} runs refused a light tenant: {refused:?}",
            refused.len()
        );
        // The same at the smallest capacities and with many hogs: 2 or 10
        // hogs asking 7.5 to 16 times the capacity together, a tenant at
        // 80% of its share and one at a sixth of it (at most 0.75/s),
        // arriving together, 100 runs each (the old rule refused the
        // first in 1 and 2 runs of 100 beside 10 hogs at 5/s and 20/s).
        for per_second in [5u32, 20] {
            let settings = capacity(per_second);
            let seconds = if per_second < 20 { 40 } else { 12 };
            for hogs in [2u64, 10] {
                let share = f64::from(per_second) / (hogs + 2) as f64;
                for run in 0..100u64 {
                    let mut clients: Vec<Client> = (0..hogs)
                        .map(|h| {
                            let times = 7.5 + (run * (7 + h) % 9) as f64;
                            client(f64::from(per_second) * times / hogs as f64)
                        })
                        .collect();
                    clients.push(Client {
                        from: 1.0,
                        ..client(0.8 * share)
                    });
                    clients.push(Client {
                        from: 1.0,
                        ..client((share / 6.0).min(0.75))
                    });
                    let seed = 0x9e37_79b9_7f4a_7c15 ^ run.wrapping_mul(0x1234_5678_9abc);
                    let seen = play_seeded(&settings, &clients, seconds, seed, 5.0);
                    assert_within_capacity(&settings, &seen, seconds);
                    let light = &seen[hogs as usize..];
                    assert!(
                        light.iter().all(|s| s.1 == 0),
                        "{per_second}/s, {hogs} hogs, run {run}: {seen:?}"
                    );
                }
            }
        }
    }

    /// The workload issue 67 measured over HTTP at 20/s: ten tenants each
    /// asking 2.1 times its share (3.5/s) and two asking 48% of theirs
    /// (0.8/s) arrive together, each request moved by up to a fifth
    /// of its spacing: over 100 runs of 40 s the light tenants are never refused.
    /// A lone tenant uses the capacity it leaves idle: asking a whole
    /// depth of requests at one instant, a sheddable one is admitted a
    /// quarter of the depth new (its share's burst of two, then the room
    /// below `θ − 3 H / 2`), and established and quiet, its burst of two
    /// and all it saved (8 of 20 at 5/s and 200/s, 152 of 500 at
    /// 5,000/s). With that room below `θ − 2 H`, new, it got a tenth.
    #[test]
    fn a_lone_tenant_bursts_into_the_idle_capacity() {
        for per_second in [5u32, 200, 5_000] {
            let settings = capacity(per_second);
            let depth = settings.depth / settings.interval;
            let mut shares = Shares::default();
            let admitted = (0..depth)
                .filter(|_| {
                    shares
                        .decide(&settings, ask(1, 1, SHEDDABLE, SECOND))
                        .admitted
                })
                .count() as u64;
            assert!(
                admitted >= depth / 4,
                "{per_second}/s, new: {admitted} of {depth}"
            );
            let mut shares = Shares::default();
            let every = settings.interval * 4;
            // Two windows within its share: no longer a newcomer.
            let mut now = SECOND;
            while now < 3 * SECOND {
                assert!(shares.decide(&settings, ask(1, 1, SHEDDABLE, now)).admitted);
                now += every;
            }
            // Quiet for a window and a depth, then a burst.
            now += SECOND + settings.depth;
            let admitted = (0..depth)
                .filter(|_| shares.decide(&settings, ask(1, 1, SHEDDABLE, now)).admitted)
                .count() as u64;
            assert!(
                admitted >= 2 + settings.kept_requests(),
                "{per_second}/s, established: {admitted} of {depth}"
            );
        }
    }

    #[test]
    fn light_tenants_arriving_with_many_others_are_served() {
        let settings = capacity(20);
        let mut refused = Vec::new();
        for run in 0..100u64 {
            let mut clients = vec![client(3.5); 10];
            clients.extend([client(0.8); 2]);
            let seed = 0x9e37_79b9_7f4a_7c15 ^ run.wrapping_mul(0x1234_5678_9abc);
            let seen = play_seeded(&settings, &clients, 40, seed, 5.0);
            assert_within_capacity(&settings, &seen, 40);
            if seen[10].1 + seen[11].1 > 0 {
                refused.push((run, seen[10], seen[11]));
            }
        }
        assert!(refused.is_empty(), "{} runs: {refused:?}", refused.len());
    }

    /// A tenant asking a little past its share beside many hogs gets its
    /// share: 1.2 to 2.4 times it beside 7 hogs asking 5 times the
    /// capacity, all arriving together at 5/s (85 s) and 20/s (22 s),
    /// after the first 3 (at least 90% of it, less the two requests of its
    /// depth it may take before). With how far ahead of its share it asks
    /// read as it was at its request before, it got 74% at 20/s (a case of
    /// the fair model).
    #[test]
    fn a_tenant_a_little_past_its_share_gets_it_beside_many_hogs() {
        let weights = [4, 5, 10, 6, 10, 2, 9];
        let mut short = Vec::new();
        // Long enough for about 9 requests of its share after the first
        // 3 s (at 5/s over 22 s, 2: a floor no rule could miss).
        for (per_second, seconds) in [(5u32, 88u64), (20, 25)] {
            let settings = capacity(per_second);
            let c = f64::from(per_second);
            let share = c / 47.0;
            for times in [1.2, 1.6, 2.35] {
                for run in 0..10u64 {
                    let mut clients: Vec<Client> = weights
                        .iter()
                        .map(|&weight| Client {
                            weight,
                            ..client(5.6 * c)
                        })
                        .collect();
                    clients.push(Client {
                        counted_from: 3.0,
                        ..client(times * share)
                    });
                    let seed = 0x9e37_79b9_7f4a_7c15 ^ run.wrapping_mul(0x1234_5678_9abc);
                    // Evenly spaced, or each request moved by a fifth.
                    let jitter = if run % 2 == 0 { 5.0 } else { 1e9 };
                    let seen = play_seeded(&settings, &clients, seconds, seed, jitter);
                    assert_within_capacity(&settings, &seen, seconds);
                    let floor = 0.9 * share * (seconds - 3) as f64 - 2.0;
                    if (seen[7].0 as f64) < floor {
                        short.push(format!(
                            "{per_second}/s {times}×: {:?} < {floor:.1}",
                            seen[7]
                        ));
                    }
                }
            }
        }
        assert!(short.is_empty(), "{} short: {short:?}", short.len());
    }

    /// Made-up ids ask alike, so none is busy but by chance: a flood at
    /// 700/s, each request under one of 100 or 1,000 ids picked at random
    /// (about 7 or 0.7 a window each), beside an established tenant at
    /// 20/s, for 12 s: no made-up id becomes a tenant of its own, and the
    /// tenant's share is the capacity over itself and the place (which
    /// weighs 2 once occupied 8 s: 66). At twice the mean rate, or from 4
    /// requests a window, some did (8 and 10).
    #[test]
    fn no_made_up_id_is_busy_by_chance() {
        let settings = capacity(200);
        for ids in [100u64, 1_000] {
            let mut shares = Shares::default();
            let mut random = 0x9e37_79b9_7f4a_7c15u64 ^ ids;
            let mut events: Vec<(u64, u64)> = (0..280).map(|n| (n * SECOND / 20, 0)).collect();
            for n in 0..(700 * 12) {
                next_random(&mut random);
                events.push((2 * SECOND + n * SECOND / 700, 1 + (random >> 33) % ids));
            }
            events.sort();
            let mut lowest = u32::MAX;
            for (at, id) in events {
                let mut tenant = [0; 16];
                tenant[..8].copy_from_slice(&id.to_le_bytes());
                let ask = Ask {
                    tenant,
                    weight: 1,
                    class: DEFAULT,
                    now: SECOND + at,
                };
                let verdict = shares.decide(&settings, ask);
                if id == 0 && at > 3 * SECOND {
                    lowest = lowest.min(verdict.share);
                }
            }
            assert_eq!(lowest, 66, "{ids} made-up ids");
        }
    }

    /// The guide's bound on made-up tenants: graduations are paced, so
    /// after `t` s at most `N = 16 + t / W` made-up ids are tenants of
    /// their own, and a real tenant of weight `w` keeps a share of at
    /// least `C · w / (Σw + N + 1 + t / (8 W))`. Made-up ids arriving one
    /// every `W / 2`, `W` and `2 W`, each asking like a real tenant, at
    /// 1000/s for 30 s beside one light tenant.
    #[test]
    fn made_up_tenants_graduate_at_most_one_a_window() {
        let settings = capacity(1000);
        for every in [0.5, 1.0, 2.0] {
            let mut shares = Shares::default();
            let seconds = 30.0;
            let mut events: Vec<(u64, u8)> = Vec::new();
            for id in 1..=(seconds / every) as u8 {
                let from = f64::from(id) * every;
                let mut at = from;
                while at < seconds {
                    events.push(((at * SECOND as f64) as u64, id));
                    at += 0.2;
                }
            }
            for n in 0..(seconds * 10.0) as u64 {
                events.push((n * SECOND / 10 + 1, 0));
            }
            events.sort();
            let mut lowest = u32::MAX;
            for (at, id) in events {
                let verdict = shares.decide(&settings, ask(id, 1, DEFAULT, SECOND + at));
                if id == 0 && at > SECOND {
                    let t = at as f64 / SECOND as f64;
                    let bound = 1000.0 / (1.0 + SMALL_POOL as f64 + t + 1.0 + t / 8.0);
                    assert!(
                        f64::from(verdict.share) >= bound.floor(),
                        "made-up ids every {every} s, at {t:.1} s: share {} < {bound:.1}",
                        verdict.share
                    );
                    lowest = lowest.min(verdict.share);
                }
            }
            // They do dilute it: the bound is no formality.
            assert!(lowest < 200, "every {every} s: {lowest}");
        }
    }

    /// At larger capacities a newcomer asking more than the newcomers'
    /// place gives it (`p = C / (hogs + 1) / 2` here: the place weighs one
    /// against each hog, and two newcomers share it) loses at most what
    /// it asks past that in the quarter window before it graduates,
    /// `⌈(r − p) · W / 4⌉`, then is served in full: beside 2 hogs at 200/s
    /// a tenant at 80% of its share loses at most 1 request of 440 (bound
    /// 2), at 1000/s 7 of 2,200 (bound 9); a sixth of its share, none.
    #[test]
    fn a_newcomer_loses_at_most_what_it_asks_past_the_newcomers_place() {
        for (per_second, hogs, runs) in [(200u32, 2u64, 100u64), (200, 10, 30), (1000, 2, 30)] {
            let settings = capacity(per_second);
            let c = f64::from(per_second);
            let share = c / (hogs + 2) as f64;
            let place = c / (hogs + 1) as f64 / 2.0;
            for run in 0..runs {
                let mut clients: Vec<Client> = (0..hogs)
                    .map(|h| client(c * (7.5 + (run * (7 + h) % 9) as f64) / hogs as f64))
                    .collect();
                let light = [0.8 * share, share / 6.0];
                clients.extend(light.map(|r| Client {
                    from: 1.0,
                    ..client(r)
                }));
                let seed = 0x9e37_79b9_7f4a_7c15 ^ run.wrapping_mul(0x1234_5678_9abc);
                let seen = play_seeded(&settings, &clients, 4, seed, 5.0);
                assert_within_capacity(&settings, &seen, 4);
                for (r, s) in light.iter().zip(&seen[hogs as usize..]) {
                    let bound = ((r - place) / 4.0).max(0.0).ceil() as u64;
                    assert!(
                        s.1 <= bound,
                        "{per_second}/s, {hogs} hogs, run {run}: a newcomer at {r}/s lost {} \
                         (at most {bound}): {seen:?}",
                        s.1
                    );
                }
            }
        }
    }

    /// Critical requests past their tenant's share (passed by the reserve)
    /// are taken from every other share by weight: four sheddable hogs
    /// asking a quarter to 7 times the capacity beside a critical tenant
    /// asking 1.2 to 2 times its share each get at least 95% of
    /// `(C − critical) · w / Σw` of the others, at 20/s and at 600/min
    /// (random cases of the fair model found the one asking least at
    /// 87–90%).
    #[test]
    fn critical_requests_past_their_share_cost_every_share_alike() {
        for (limit, window, demands, weights, critical) in [
            (
                20,
                SECOND,
                [43.0, 30.0, 123.0, 141.0],
                [8.0, 4.0, 3.0, 7.0],
                (1, 2.0),
            ),
            (
                600,
                60 * SECOND,
                [193.6, 229.0, 221.8, 145.4],
                [9.0, 6.0, 9.0, 9.0],
                (4, 79.8),
            ),
        ] {
            let settings = Settings::new(limit, window, [100, 80, 70], 10_000);
            let per_second = |per_window: f64| per_window * SECOND as f64 / window as f64;
            let mut clients: Vec<Client> = demands
                .iter()
                .zip(weights)
                .map(|(&demand, weight)| Client {
                    weight: weight as u32,
                    class: SHEDDABLE,
                    ..client(per_second(demand))
                })
                .collect();
            clients.push(Client {
                weight: critical.0,
                class: CRITICAL,
                ..client(per_second(critical.1))
            });
            let windows = 40;
            let seconds = windows * window / SECOND;
            let seen = play(&settings, &clients, seconds);
            let left = f64::from(limit) - critical.1;
            for (i, weight) in weights.iter().enumerate() {
                let share = left * weight / weights.iter().sum::<f64>();
                let floor = share.min(demands[i]) * windows as f64;
                assert!(
                    seen[i].0 as f64 >= 0.95 * floor,
                    "{limit} a window: hog {i} got {} of {floor:.0}: {seen:?}",
                    seen[i].0
                );
            }
            assert_eq!(seen[4].1, 0, "{seen:?}");
        }
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
        // A weight past 2^20 (the place's weight times a tenant's).
        let (interval, weights, weight) = (MAX_WINDOW_US, 10_000 * 10_001_000, 10_000 * 999);
        let exact = (u128::from(interval) * u128::from(weights)).div_ceil(u128::from(weight));
        let exact = u64::try_from(exact).unwrap().min(MAX_TENANT_INTERVAL);
        assert_eq!(tenant_interval(interval, weights, weight), exact);
    }

    /// Concurrent callers read the clock before they take the state: a
    /// decision may come at an earlier time than the one before it.
    #[test]
    fn an_earlier_time_than_the_last_decides_without_panicking() {
        let settings = capacity(200);
        let mut shares = Shares::default();
        for (i, now) in [
            5 * SECOND,
            5 * SECOND - 1,
            3 * SECOND,
            5 * SECOND + SECOND / 2,
        ]
        .into_iter()
        .enumerate()
        {
            for tenant in 0..20 {
                shares.decide(&settings, ask(tenant, 1, i % 3, now));
            }
        }
        assert_eq!(shares.active(), 20);
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
        assert_eq!(shares.pool.weights(), 1);
    }
}
