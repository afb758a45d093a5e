//! A shared capacity's decision (the `FairShare` layer's), in integer
//! microseconds. The Redis script (`backend/redis/lua/fair_share.lua`)
//! makes the same decision step for step; the conformance tests hold them
//! to it.
//!
//! **The guarantee.** For a capacity of `C` per window `W` (`T = ⌈W / C⌉`
//! between admissions), one GCRA of depth `D` admits at most
//! `t / T + D / T` requests over any time `t`, whatever else is decided.
//! Each class may fill that depth up to its threshold `θ` (critical all
//! of it, default and sheddable their parts), and a request needs room
//! below `θ` less a part of the headroom `H`: none for a critical request
//! within the critical reserve; `H · e` for one within its tenant's share
//! `C · w / Σw` (its GCRA, with what it kept of its unused share), where
//! `e`, from 0 to 1, is how far the tenant asks past its share (at most a
//! half for a request spending share its tenant left unused); `3 H / 2`
//! for one past its share. So within a class every request within a
//! share comes before every request past one, and a tenant asking no
//! more than its share (`e = 0`) before every tenant asking more: it is
//! refused only when tenants asking no more than theirs fill the room
//! above, and their shares add up to at most `C`. Tenants new to the
//! capacity share one place until they graduate, so made-up ids dilute
//! only that place.
//!
//! **The rules**, each with why its constant is what it is; in brackets,
//! another value and a test it fails (the unit tests in `shares`; the
//! fair model's in `tests/it/middleware/fair_model.rs`, whose on-demand
//! runs take `SEED` and `WHICH`):
//!
//! - The depth `D = max(W / 10, 20 T)`: twenty requests keep the classes'
//!   thresholds and the headroom whole requests apart at any capacity
//!   [15: `light_tenants_arriving_with_many_others_are_served`].
//! - The headroom `H` is 30% of `D` (so at least 6 requests): room for the
//!   requests within shares above those past them [20%:
//!   `made_up_tenants_dilute_nobody`], not so much that the requests past
//!   shares lose their part [40%:
//!   `a_lone_tenant_bursts_into_the_idle_capacity`].
//! - A request past its share needs room below `θ − 3 H / 2`, so that the
//!   requests within the shares of tenants asking more than theirs keep
//!   half a headroom above all borrowing [`θ − H`:
//!   `two_hogs_asking_in_bursts_share_by_weight`]; no more, so that a
//!   lone new sheddable tenant, with nothing kept, still bursts a quarter
//!   of the depth into capacity left idle [`θ − 2 H`:
//!   `a_lone_tenant_bursts_into_the_idle_capacity`].
//! - A request is within its tenant's share by a GCRA at the share's
//!   interval `T_t` of tolerance `2 T_t`, a burst of two [`T_t`:
//!   `light_tenants_are_served_at_every_capacity`; longer bursts are
//!   what a tenant keeps, below]. Its time of arrival counts at most
//!   `2 T_t` ahead, when read and when kept: borrowing what others leave
//!   costs nothing later [unbounded:
//!   `borrowing_idle_capacity_costs_nothing_later`].
//! - For a tenant of its own that time falls behind the present by as
//!   long as its GCRA stood empty, up to as many of its intervals as the
//!   headroom holds requests, `⌊H / T⌋ · T_t` (six at least): it keeps
//!   what it left of its share unused, so that a client asking at
//!   random, or on connections paced alike, keeps its share [none kept:
//!   `a_light_tenant_asking_at_random_within_its_share_is_served`,
//!   `hogs_a_little_past_their_shares_on_six_connections_keep_them`,
//!   `two_hogs_asking_in_bursts_share_by_weight` and
//!   `a_lone_tenant_bursts_into_the_idle_capacity`; half as many: the
//!   first and the last]. A request refused within its share loses an
//!   interval of it, so that a tenant refused the share it asked for
//!   keeps none of it [not:
//!   `a_tenant_a_little_past_its_share_gets_it_beside_many_hogs`, and 42
//!   of the fair model's 1,000 `hogs` cases]. A newcomer keeps nothing.
//! - `e` counts every request of the tenant, admitted or not: a GCRA at
//!   `T_t` of depth `d = 2 T_t` [`T_t` or `4 T_t`:
//!   `critical_requests_past_their_share_cost_every_share_alike`], and `e`
//!   how far past `d` ahead it is, in parts of `d`, read drained to the
//!   request's time before the request counts. It is held within `2 d`,
//!   so that a tenant that slows to its share is back at 0 within a depth
//!   [`1.5 d`: `light_tenants_are_served_at_every_capacity`; `4 d`:
//!   `a_light_tenant_asking_at_random_within_its_share_is_served`], and
//!   starts `d` ahead, so that a hog is seen from its second request [0:
//!   `light_tenants_arriving_with_many_others_are_served`].
//! - A request spending share its tenant left unused (its GCRA empty or
//!   behind the present: a whole `2 T_t` left unused, refused or not
//!   asking) counts `e` at most a half: when the shares add up to more
//!   than `C` (newcomers, each request new, take more than the
//!   newcomers' place), tenants asking less far past their shares do not
//!   keep it from its share for good, and tenants spending what they
//!   kept come after those asking within their shares [no cap:
//!   `a_tenant_far_past_its_share_keeps_it_beside_tenants_less_far_past`
//!   and `a_light_tenant_asking_at_random_within_its_share_is_served`;
//!   0: `made_up_tenants_dilute_nobody`,
//!   `a_light_tenant_comes_before_tenants_spending_what_they_kept` and
//!   six more].
//! - The newcomers' place weighs 1 against the established tenants (and
//!   its newcomers share it by weight), one more every
//!   [`POOL_GROWTH_WINDOWS`](newcomers::POOL_GROWTH_WINDOWS), 8, windows
//!   it stays occupied, up to their weights: newcomers that stay new, as
//!   tenants asking seldom and crowds of more than 16 do, come near their
//!   weights [never grown:
//!   `a_crowd_past_sixteen_arriving_together_is_served_once_the_place_grew`].
//! - A newcomer graduates, a tenant of its own from then, a quarter window
//!   after it came [none: `made_up_tenants_dilute_nobody`; an eighth:
//!   `made_up_tenants_gone_within_a_quarter_window_dilute_nobody`; a half:
//!   `a_newcomer_loses_at_most_what_it_asks_past_the_newcomers_place`],
//!   if the place holds at most [`SMALL_POOL`](newcomers::SMALL_POOL), 16,
//!   a crowd arriving together [8: two crowds of twelve in
//!   `the_cases_seen_hold_on_both_backends`, and 6 of the fair model's
//!   1,000 `crowd` cases; 24:
//!   `critical_requests_within_the_reserve_pass_any_number_of_tenants`],
//!   or it is busy: [`BUSY_SAMPLE`](newcomers::BUSY_SAMPLE), 8, requests
//!   in its last window and [`BUSY_TIMES`](newcomers::BUSY_TIMES), 4,
//!   times the newcomers' mean rate, which made-up ids asking alike reach
//!   only by chance [4 requests or twice the mean:
//!   `no_made_up_id_is_busy_by_chance`; 16 or 8 times:
//!   `made_up_tenants_dilute_nobody`]. At most 16 graduate at once, then
//!   one a window [any number:
//!   `made_up_tenants_graduate_at_most_one_a_window`].
//! - In a place holding more than 16 a newcomer's `e` is at least a
//!   third, so that made-up ids coming back with their shares unused
//!   stay behind established tenants asking within theirs [none:
//!   `made_up_tenants_dilute_nobody`]; in a smaller place it is its own,
//!   so that a light newcomer is not behind a crowd of hogs whose `e` has
//!   not grown yet [a third there too:
//!   `light_tenants_arriving_with_many_others_are_served`].
//! - Critical requests up to the critical reserve's part of `C` (20% by
//!   default) count as within a share whatever their tenant's share [no
//!   reserve: `critical_requests_within_the_reserve_pass_any_number_of_tenants`];
//!   those past their shares, counted over the depth's whole windows, come
//!   out of what the shares divide [not:
//!   `critical_requests_past_their_share_cost_every_share_alike`].
//! - A tenant is active while it asked within the last `max(2 W, 2 D)`,
//!   the definition the fair model checks [`max(W, D)`: 16 of 300 cases
//!   of tenants asking seldom, `SEED=11 WHICH=seldom`]; at most
//!   [`EXPIRE_AT_ONCE`](tenants::EXPIRE_AT_ONCE), 64, expired tenants
//!   leave per decision, oldest first, so that a decision after a crowd
//!   went quiet costs a bounded amount [unbounded: all 200 of
//!   `idle_tenants_leave_at_most_64_a_decision`, in
//!   `tests/it/middleware/fair_share.rs`, leave at once, on either
//!   backend].
//!
//! The files: `settings` (a capacity's numbers), `shares` (the decision),
//! `pace` (a tenant's GCRA, with what it keeps of its unused share, and
//! how far ahead it asks), `newcomers` (the newcomers' place), `tenants`
//! (the active tenants, told apart up to a cap), `counted` (requests by
//! whole windows).

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
