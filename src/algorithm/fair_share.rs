//! A shared capacity's decision (the `FairShare` layer's), in integer
//! microseconds. The Redis script (`backend/redis/lua/fair_share.lua`)
//! makes the same decision step for step; the conformance tests hold them
//! to it.
//!
//! **The guarantee.** For a capacity of `C` per window `W` (`T = ⌈W / C⌉`
//! between admissions), one GCRA of depth `D = max(W / 10, 20 T)` admits
//! at most `t / T + D / T` requests over any time `t`. Each class may fill
//! that depth up to its threshold `θ` (critical all of it, default and
//! sheddable their parts), and a request decides where below `θ` it must
//! find room: a request past its tenant's share (`C · w / Σw`) needs room
//! below `θ − 3 H / 2`, the headroom `H` being 30% of the depth (at least
//! 6 requests); one within its share below `θ − H · e`, where `e`, from 0 to
//! 1, is how far its tenant asks past its share. So, within a class, every
//! request within a share comes before every request past one, and a
//! tenant asking no more than its share (`e = 0`) comes before every
//! tenant asking more, the one asking less far past before the one asking
//! further (a hog's `e` is 1): it is refused only when tenants asking no
//! more than theirs fill the room above — and their shares add up to at
//! most `C`.
//!
//! The rules, each with the test that fails without it:
//! - `e` is the less of two measures of every request the tenant makes,
//!   admitted or not, read when it asks, before the request counts. How
//!   far ahead: a GCRA at its share's interval `T_t` with its share's
//!   depth `d = max(2 T_t, H / 2)`, counting how far past `d` ahead it is,
//!   in parts of `d`, held within `2 d` (a tenant asking within its share
//!   and bursting its depth stays at 0; a hog stays at 1:
//!   `light_tenants_are_served_at_every_capacity`). A tenant starts `d`
//!   ahead, so that a hog is seen from its second request
//!   (`light_tenants_arriving_with_many_others_are_served`). Read as it
//!   was at the tenant's request before, it kept a tenant asking every
//!   4 s half a depth ahead (`the_cases_seen_hold_on_both_backends`, in
//!   the fair model's tests).
//! - How fast: `4/3 (1 − s / T_t)`, at most 1, `s` its mean spacing
//!   (each spacing at most `2 T_t`): a tenant asking 1.2 times its share
//!   counts 0.22, twice 0.67, 4 times or more 1, a hog
//!   (`a_tenant_a_little_past_its_share_gets_it_beside_many_hogs`). Hogs
//!   so meet as equals within their shares
//!   (`critical_requests_past_their_share_cost_every_share_alike` fails
//!   with `1 − s / T_t`). `s` is the mean of the spacings so far up to 8,
//!   then an exponential mean moved by an eighth of each, known from the
//!   second request (a mean from 0 took 8 to 16 requests to tell a
//!   tenant at 2.35 times its share from a hog: the fair model's cases
//!   seen). A tenant that is no hog leaves at least one request more room
//!   than a hog: `H` is 6 requests at the least, and a part of it smaller
//!   than one request is no priority (a tenant at 3.5 times its share
//!   beside 8 hogs at 5/s got 76% of it: the cases seen).
//! - A request past its share needs room below `θ − 3 H / 2`, not
//!   `θ − H`: the requests within the shares of tenants asking more than
//!   theirs keep half a headroom of their own above all borrowing
//!   (`two_hogs_share_by_weight`). A lone tenant so bursts its share's
//!   depth, then about a third of the capacity's.
//! - Tenants new to the capacity share one place (inside it, by weight):
//!   made-up tenant ids dilute only that place. The place weighs 1, and
//!   one more every [`POOL_GROWTH_WINDOWS`] windows it stays occupied, up
//!   to its newcomers' weights. A newcomer becomes a tenant of its own a
//!   quarter window after it arrived, if the place holds at most
//!   [`SMALL_POOL`] tenants or it asks at least [`BUSY_TIMES`] the
//!   newcomers' mean rate (at most `SMALL_POOL` at once, then one a
//!   window). A newcomer's `e` is at least a third, so that made-up ids
//!   coming back with their shares saved stay behind established tenants
//!   asking within theirs (`made_up_tenants_dilute_nobody`).
//! - Critical requests up to the critical reserve's part of `C` (20% by
//!   default, a GCRA of its own) count as within a share whatever their
//!   tenant's share; those past their shares, counted over the depth's
//!   whole windows, are taken out of what the shares divide
//!   (`critical_requests_past_their_share_cost_every_share_alike`).
//! - A tenant's time of arrival at its share counts at most `d` ahead:
//!   borrowing leaves it at most a full share behind. A tenant is active
//!   while it asked within the last `max(2 W, 2 D)` (at most
//!   [`EXPIRE_AT_ONCE`] expired tenants leave per decision).

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

/// The capacity's depth holds at least this many requests, so that the
/// classes' thresholds and the headroom are whole requests apart at any
/// capacity.
pub(crate) const MIN_DEPTH_REQUESTS: u64 = 20;

/// Newcomers graduate as soon as their first window ends while at most
/// this many share the newcomers' place; at most this many graduate at
/// once, then one a window.
pub(crate) const SMALL_POOL: u64 = 8;

/// A newcomer is judged busy on at least this many requests of its last
/// window.
pub(crate) const BUSY_SAMPLE: u64 = 8;

/// A newcomer asking this many times the newcomers' mean rate is busy: a
/// tenant of its own, not one of many made-up ids (which ask alike, and
/// twice the mean by chance now and then).
pub(crate) const BUSY_TIMES: u64 = 4;

/// The newcomers' place weighs one more every this many windows it stays
/// occupied (up to its newcomers' weights, at most [`MAX_POOL_WEIGHT`]).
pub(crate) const POOL_GROWTH_WINDOWS: u64 = 8;

/// The newcomers' place weighs at most this: `weight · MAX_WEIGHT` stays
/// well below 2^53 in every product.
pub(crate) const MAX_POOL_WEIGHT: u64 = 10_000;

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
    /// `H`: a request within its tenant's share finds room below its
    /// class's threshold less `H` times how far its tenant asks past its
    /// share, one past its share below the threshold less `3 H / 2`.
    pub headroom: u64,
    /// The critical reserve's interval and depth, µs (an interval of 0:
    /// no reserve).
    pub reserve_interval: u64,
    pub reserve_depth: u64,
    /// How many tenants are told apart; the rest share [`OVERFLOW`].
    pub max_tenants: usize,
    /// The percent of the depth each class may fill, as given.
    pub fills: [u8; 3],
    /// The capacity per window, and the window in µs (for headers).
    pub limit: u32,
    pub window: u64,
}

impl Settings {
    /// `limit` per `window` µs, each class filling at most its percent of
    /// the depth (critical, default, sheddable).
    pub(crate) fn new(limit: u32, window: u64, fills: [u8; 3], max_tenants: usize) -> Self {
        let interval = window.div_ceil(u64::from(limit.max(1))).max(1);
        let depth = (window / 10).max(interval * MIN_DEPTH_REQUESTS);
        let fill = |percent: u8| (depth * u64::from(percent.min(100)) / 100).max(interval);
        let thresholds = fills.map(fill);
        // Six requests at least: whole requests apart at any capacity.
        let headroom = (depth * 3 / 10).max(6 * interval);
        let reserve = u64::from(100u8.saturating_sub(fills[1]));
        let (reserve_interval, reserve_depth) = if reserve == 0 {
            (0, 0)
        } else {
            let reserve_interval = (interval * 100).div_ceil(reserve);
            (
                reserve_interval,
                (depth * reserve / 100).max(2 * reserve_interval),
            )
        };
        Self {
            interval,
            depth,
            // A tenant asking once per its share's interval stays active at
            // small capacities too.
            active_for: (window * 2).max(depth * 2),
            thresholds,
            headroom,
            reserve_interval,
            reserve_depth,
            max_tenants: max_tenants.max(1),
            fills,
            limit,
            window,
        }
    }

    /// Over how many windows the critical requests past their shares are
    /// counted: the depth's, at least one (below 20 requests a window, one
    /// window holds too few of them to tell their rate).
    pub(crate) fn reserved_windows(&self) -> u64 {
        self.depth.div_ceil(self.window).max(1)
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

/// Requests counted in whole windows (`k = now / W`), the current one's
/// and the one before: a sliding estimate of a rate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counted {
    k: u64,
    current: u64,
    previous: u64,
}

impl Counted {
    /// One more at `now`.
    fn count(&mut self, now: u64, window: u64) {
        let k = now / window;
        // A caller whose clock was read before another's counts in the
        // window it finds.
        if k > self.k {
            self.previous = if k == self.k + 1 { self.current } else { 0 };
            self.current = 0;
            self.k = k;
        }
        self.current += 1;
    }

    /// The requests of the last window, times 1024: the current window's
    /// and the part of the one before that the last window still covers.
    fn last_window(&self, now: u64, window: u64) -> u64 {
        let k = now / window;
        let (current, previous) = match k.saturating_sub(self.k) {
            0 => (self.current, self.previous),
            1 => (0, self.current),
            _ => (0, 0),
        };
        let left = (window - now % window) * 1024 / window;
        current * 1024 + previous * left
    }
}

/// Where a tenant stands with the capacity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Not seen yet.
    #[default]
    New,
    /// In the newcomers' place, since it entered.
    Pooled,
    /// A tenant of its own.
    Established,
}

/// A tenant's own state: its time of arrival at its share, how far ahead
/// of its share it asks, where it stands, since when, the weight it
/// counts for in the newcomers' place, and its requests as a newcomer.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Own {
    tat: u64,
    demand: Demand,
    standing: Standing,
    since: u64,
    pooled_weight: u64,
    asked: Counted,
}

/// The newcomers' place: how many, their weights, their requests, and
/// since when it is occupied.
#[derive(Clone, Copy, Debug, Default)]
struct Pool {
    members: u64,
    weights: u64,
    asked: Counted,
    since: u64,
}

impl Pool {
    /// What the place weighs at `now`: 1, and one more every
    /// [`POOL_GROWTH_WINDOWS`] windows occupied, up to its newcomers'
    /// weights (nothing while empty).
    fn weight(&self, now: u64, window: u64) -> u64 {
        if self.members == 0 {
            return 0;
        }
        let grown = 1 + now.saturating_sub(self.since) / (POOL_GROWTH_WINDOWS * window);
        grown.min(self.weights).min(MAX_POOL_WEIGHT)
    }
}

/// A capacity's state: its own time of arrival, the critical reserve's,
/// the critical requests it admitted past their shares, the
/// graduations', the newcomers' place, and each active tenant's.
#[derive(Debug, Default)]
pub(crate) struct Shares {
    tat: u64,
    reserve_tat: u64,
    reserved: Counted,
    graduated_tat: u64,
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
            |gone| {
                if gone.own.standing == Standing::Pooled {
                    pool.members -= 1;
                    pool.weights -= gone.own.pooled_weight;
                }
            },
        );
        let (id, mut tenant, active) = self.tenants.enter(&ask, settings.max_tenants);
        let weight = u64::from(tenant.weight);
        let own = &mut tenant.own;
        self.stand(settings, own, weight, now);

        // The tenant's share: of the capacity over the established
        // tenants and the newcomers' place, and of that place over its
        // newcomers.
        let place = self.pool.weight(now, settings.window);
        let top = self.tenants.weights() - self.pool.weights + place;
        let (shared, limit) = self.shared(settings, now);
        let pooled = own.standing == Standing::Pooled;
        let (interval, share) = if pooled {
            (
                tenant_interval(shared, top * self.pool.weights, place * weight),
                limit * place / top * weight / self.pool.weights,
            )
        } else {
            (tenant_interval(shared, top, weight), limit * weight / top)
        };
        let share = u32::try_from(share.max(1)).unwrap_or(u32::MAX);
        // Its share's depth: two of its intervals, at least half the
        // headroom (a tenant asking more often than its share is admitted
        // at its share, not at a multiple of its own spacing).
        let depth = (2 * interval).max(settings.headroom / 2);
        let pace = Pace::new(interval, depth, own.tat, now);
        let ahead = own.demand.ask(interval, depth, now, pooled);
        let reserve = Pace::new(
            settings.reserve_interval,
            settings.reserve_depth,
            self.reserve_tat,
            now,
        );
        let in_reserve =
            ask.class == 0 && !pace.within && settings.reserve_interval > 0 && reserve.within;
        // Where the request must find room (see the module's guarantee).
        let class = ask.class.min(2);
        let threshold = if in_reserve {
            settings.thresholds[class]
        } else if pace.within {
            settings.thresholds[class].saturating_sub(ahead.room(settings))
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

    /// Where `own` (of `weight`) stands now: a new tenant joins the
    /// newcomers' place; a newcomer is counted there, and graduates when
    /// it may.
    fn stand(&mut self, settings: &Settings, own: &mut Own, weight: u64, now: u64) {
        match own.standing {
            Standing::New => {
                own.standing = Standing::Pooled;
                own.since = now;
                if self.pool.members == 0 {
                    self.pool.since = now;
                }
                self.pool.members += 1;
            }
            Standing::Pooled => self.pool.weights -= own.pooled_weight,
            Standing::Established => return,
        }
        own.pooled_weight = weight;
        self.pool.weights += weight;
        own.asked.count(now, settings.window);
        self.pool.asked.count(now, settings.window);
        if now.saturating_sub(own.since) >= settings.window / 4
            && self.graduates(settings, own, now)
        {
            // A tenant of its own from now: no debt from its share as a
            // newcomer (how far ahead it asks stays).
            own.standing = Standing::Established;
            own.tat = now;
            self.pool.members -= 1;
            self.pool.weights -= weight;
        }
    }

    /// Whether `own`, a newcomer for a quarter window now, becomes a
    /// tenant of its own: while the newcomers' place is small or it asks
    /// at least [`BUSY_TIMES`] their mean rate, within the graduations'
    /// budget.
    fn graduates(&mut self, settings: &Settings, own: &Own, now: u64) -> bool {
        let window = settings.window;
        // Its rate (its requests over the part of the last window it has
        // been here, in 64ths) against the newcomers' mean (theirs over
        // the part the place has been occupied), in doubles, as the script
        // computes them, so that both round alike.
        let here = |since: u64| now.saturating_sub(since).min(window) * 64 / window;
        let asked = own.asked.last_window(now, window);
        let busy = asked >= BUSY_SAMPLE * 1024
            && asked as f64 * self.pool.members as f64 * here(self.pool.since) as f64
                >= BUSY_TIMES as f64
                    * self.pool.asked.last_window(now, window) as f64
                    * here(own.since) as f64;
        let graduated_tat = self.graduated_tat.max(now) + window;
        let graduates =
            (self.pool.members <= SMALL_POOL || busy) && graduated_tat - now <= SMALL_POOL * window;
        if graduates {
            self.graduated_tat = graduated_tat;
        }
        graduates
    }
}

/// One request against a GCRA: its time of arrival after the request,
/// and whether that is within the depth.
#[derive(Clone, Copy, Debug)]
struct Pace {
    tat: u64,
    depth: u64,
    now: u64,
    within: bool,
}

impl Pace {
    /// At `interval` µs a request with `depth` µs of tolerance, from
    /// `tat`: a debt counts at most the depth (one left from a smaller
    /// share, or from borrowing).
    fn new(interval: u64, depth: u64, tat: u64, now: u64) -> Self {
        let tat = tat.clamp(now, now + depth) + interval;
        Self {
            tat,
            depth,
            now,
            within: tat - now <= depth,
        }
    }

    /// Its time of arrival once admitted, at most the depth ahead.
    fn kept(&self) -> u64 {
        self.tat.min(self.now + self.depth)
    }
}

/// How far ahead of its share a tenant asks, admitted or not: a GCRA of
/// every request at the share's interval, its level in
/// [`DEPTH`](Self::DEPTH)ths of the share's depth (so that it means the
/// same when the share changes), held at most two depths ahead; and how
/// fast it asks, the mean spacing of its requests.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Demand {
    level: u64,
    at: u64,
    /// The mean spacing, in parts of the share's interval (`interval /
    /// unit` of them make one, see [`unit`](Self::unit)), at most two
    /// intervals, over `spacings` of them (at most
    /// [`SPACINGS`](Self::SPACINGS)); 0 before the tenant's second request.
    spacing: u64,
    spacings: u64,
}

impl Demand {
    /// A depth, in the level's units.
    const DEPTH: u64 = 1024;

    /// A tenant asking this many times its share or more asks like a
    /// hog: hogs are equals within their shares (each floor holds alike,
    /// however far past it each asks), while one asking less far past is
    /// served first.
    const HOG: u64 = 4;

    /// The mean spacing is over the spacings so far up to this many, then
    /// moves by `1 / SPACINGS` of each new one (an exponential mean):
    /// enough that spacings moved by a fifth at random move it by less
    /// than a tenth, few enough that a tenant that speeds up is seen
    /// within about 8 requests.
    const SPACINGS: u64 = 8;

    /// How far ahead of its share the tenant asks: the less of how far
    /// past a depth ahead it is (0 while it asks within its share and its
    /// depth's burst, all a further depth ahead) and how much faster than
    /// its share it asks (`4/3 (1 − spacing / interval)`: a tenant at
    /// twice its share two thirds, at [`HOG`](Self::HOG) times or more
    /// all). A newcomer counts at least a third: made-up ids silent a
    /// while, their shares saved, come back behind established tenants
    /// asking within theirs.
    fn ahead(&self, interval: u64, pooled: bool) -> Ahead {
        let past = self.level.saturating_sub(Self::DEPTH).min(Self::DEPTH);
        let whole = (interval / Self::unit(interval)).max(1);
        let faster = Self::DEPTH - Self::DEPTH * self.spacing.min(whole) / whole;
        let faster = faster * Self::HOG / (Self::HOG - 1);
        let part = past.min(faster).min(Self::DEPTH);
        Ahead {
            part: if pooled {
                part.max(Self::DEPTH / 3)
            } else {
                part
            },
            hog: faster >= Self::DEPTH,
        }
    }

    /// The spacing's unit at `interval`: about a 1024th of it, whole µs
    /// (products stay below 2^53: the script computes in doubles).
    fn unit(interval: u64) -> u64 {
        interval.div_ceil(Self::DEPTH).max(1)
    }

    /// One more request at `now`, at a share of `interval` µs and `depth`
    /// µs: how far ahead the tenant asks ([`ahead`](Self::ahead)) at
    /// `now`, with this request's spacing and before it counts. A tenant
    /// starts a depth ahead: a hog is past the depth from its third
    /// request, and one asking within its share never reaches it.
    fn ask(&mut self, interval: u64, depth: u64, now: u64, pooled: bool) -> Ahead {
        let step = depth.div_ceil(Self::DEPTH);
        let unit = Self::unit(interval);
        if self.at == 0 {
            self.level = Self::DEPTH;
        } else {
            let since = now.saturating_sub(self.at);
            self.level = self.level.saturating_sub(since.min(2 * depth) / step);
            let spacing = since.min(2 * interval) / unit;
            let n = (self.spacings + 1).min(Self::SPACINGS);
            self.spacing = (self.spacing * (n - 1) + spacing) / n;
            self.spacings = n;
        }
        let ahead = self.ahead(interval, pooled);
        self.level = (self.level + interval / step).min(2 * Self::DEPTH);
        self.at = self.at.max(now);
        ahead
    }
}

/// How far ahead of its share a tenant asks ([`Demand::ask`]).
#[derive(Clone, Copy, Debug)]
struct Ahead {
    /// In [`Demand::DEPTH`]ths: how much of the headroom its requests
    /// within its share leave.
    part: u64,
    /// Whether it asks [`Demand::HOG`] times its share or more.
    hog: bool,
}

impl Ahead {
    /// The room a request within its share leaves below the threshold,
    /// `H · e`: less one request at most for a tenant asking less than
    /// [`HOG`](Demand::HOG) times its share, ahead of the hogs by at least
    /// that (`H` is 6 requests at the least, where less than one apart is
    /// no priority at all).
    fn room(&self, settings: &Settings) -> u64 {
        let room = settings.headroom * self.part / Demand::DEPTH;
        if self.hog {
            room
        } else {
            room.min(settings.headroom - settings.interval)
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
                random = random
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
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
    /// [`BUSY_SAMPLE`] times (at most its first half window).
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

    /// The same flood through limits per client address that let each of
    /// its 8 addresses send 100 requests at once, then 100 a second: the
    /// 200 ids, silent for a second, come back with their shares saved.
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
    /// they are there) is refused at most 1% at every capacity from 1/s;
    /// one asking a tenth of it, never.
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
                clients.push(Client {
                    from,
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
    /// capacity, all arriving together at 5/s and 20/s, over the 22 s
    /// after the first 3 (at least 90% of it, less the two requests of its
    /// depth it may take before). Counted only by whether it asks past its
    /// share at all, it met the hogs at their priority: 74% at 20/s (a case
    /// of the fair model).
    #[test]
    fn a_tenant_a_little_past_its_share_gets_it_beside_many_hogs() {
        let weights = [4, 5, 10, 6, 10, 2, 9];
        let mut short = Vec::new();
        for per_second in [5u32, 20] {
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
                    let seen = play_seeded(&settings, &clients, 25, seed, jitter);
                    assert_within_capacity(&settings, &seen, 25);
                    let floor = 0.9 * share * 22.0 - 2.0;
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
        assert_eq!((shares.pool.members, shares.pool.weights), (1, 1));
    }
}
