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
//! tenant asking more, the one less far ahead of its share before the
//! one further ahead: it is refused only when tenants asking no more
//! than theirs fill the room above — and their shares add up to at most
//! `C`. Tenants asking steadily past their shares reach `e = 1` and meet
//! as equals within their shares.
//!
//! The rules, each with the test that fails without it:
//! - `e` counts every request the tenant makes, admitted or not: a GCRA
//!   at its share's interval `T_t` with its share's depth
//!   `d = 2 T_t`, and `e` how far past `d` ahead it is, in
//!   parts of `d` (a tenant asking within its share and bursting its
//!   depth stays at 0; one asking at spacing `s < T_t` reaches 1 within
//!   `d / (T_t − s)` requests: `light_tenants_are_served_at_every_capacity`).
//!   The GCRA is held within `2 d`, so that a tenant that slows to its
//!   share is back at 0 within a depth (held within `4 d`, a tenant a
//!   little past its share beside hogs fell short of it:
//!   `a_tenant_a_little_past_its_share_gets_it_beside_many_hogs`). A tenant starts `d`
//!   ahead, so that a hog is seen from its second request
//!   (`light_tenants_arriving_with_many_others_are_served`). `e` is read
//!   when the tenant asks, drained to that time, before the request
//!   counts: read as it was at the tenant's request before, it kept a
//!   tenant asking every 4 s half a depth ahead, and a tenant at 2.35
//!   times its share beside 7 hogs got 74% of it
//!   (`a_tenant_a_little_past_its_share_gets_it_beside_many_hogs`, and
//!   `the_cases_seen_hold_on_both_backends` in the fair model's tests).
//! - A request past its share needs room below `θ − 3 H / 2`, not
//!   `θ − H`: the requests within the shares of tenants asking more than
//!   theirs keep half a headroom of their own above all borrowing
//!   (`two_hogs_share_by_weight`). A lone tenant so bursts its share's
//!   depth, then about a third of the capacity's.
//! - Tenants new to the capacity share one place (inside it, by weight):
//!   made-up tenant ids dilute only that place. The place weighs 1, and
//!   one more every [`POOL_GROWTH_WINDOWS`](newcomers::POOL_GROWTH_WINDOWS)
//!   windows it stays occupied, up to its newcomers' weights. A newcomer
//!   becomes a tenant of its own a quarter window after it arrived, if the
//!   place holds at most [`SMALL_POOL`](newcomers::SMALL_POOL) tenants or
//!   it asks at least [`BUSY_TIMES`](newcomers::BUSY_TIMES) the
//!   newcomers' mean rate (at most `SMALL_POOL` at once, then one a
//!   window): sixteen, so that a crowd of twelve arriving together gets
//!   its shares (`light_tenants_arriving_with_many_others_are_served`
//!   and the fair model's crowds: at 8, 6 cases of 300 broke). In a place
//!   holding more, a newcomer's `e` is at least a third, so that made-up
//!   ids coming back with their shares saved stay behind established
//!   tenants asking within theirs (`made_up_tenants_dilute_nobody`); in
//!   a smaller one it is its own, so that a light newcomer is not put
//!   behind a crowd of hogs whose `e` has not grown yet (with the third
//!   there, `light_tenants_arriving_with_many_others_are_served` refused
//!   a light tenant's first request in 18 runs of 100).
//! - Critical requests up to the critical reserve's part of `C` (20% by
//!   default, a GCRA of its own) count as within a share whatever their
//!   tenant's share; those past their shares, counted over the depth's
//!   whole windows, are taken out of what the shares divide
//!   (`critical_requests_past_their_share_cost_every_share_alike`).
//! - A tenant's time of arrival at its share counts at most `d` ahead:
//!   borrowing what others leave costs nothing later
//!   (`borrowing_idle_capacity_costs_nothing_later`). A tenant is active
//!   while it asked within the last `max(2 W, 2 D)` (at most
//!   [`EXPIRE_AT_ONCE`](tenants::EXPIRE_AT_ONCE) expired tenants leave per
//!   decision).
//!
//! The files: `settings` (a capacity's numbers), `shares` (the decision),
//! `pace` (a tenant's GCRA and how far ahead it asks), `newcomers` (the
//! newcomers' place), `tenants` (the active tenants, told apart up to a
//! cap), `counted` (requests by whole windows).

mod counted;
mod newcomers;
mod pace;
mod settings;
mod shares;
mod tenants;

pub(crate) use settings::{Settings, MAX_WINDOW_US};
pub(crate) use shares::Shares;
#[cfg(feature = "redis")]
pub(crate) use tenants::OVERFLOW;
pub(crate) use tenants::{TenantId, Tenants};

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
