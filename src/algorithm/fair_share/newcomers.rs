//! The newcomers' place: tenants new to a capacity share one place until
//! they graduate.

use super::counted::Counted;
use super::settings::Settings;

/// Newcomers graduate a quarter window after they came while at most this
/// many share the newcomers' place (a crowd of tenants arriving together,
/// as after a restart; more are taken for made-up ids); at most this many
/// graduate at once, then one a window.
pub(crate) const SMALL_POOL: u64 = 16;

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

/// Where a tenant stands with the capacity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Standing {
    /// Not seen yet.
    #[default]
    New,
    /// In the newcomers' place, since it entered.
    Pooled,
    /// A tenant of its own.
    Established,
}

/// A tenant's standing as a newcomer: where it stands, since when, the
/// weight it counts for in the newcomers' place, and its requests there.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Newcomer {
    standing: Standing,
    since: u64,
    pooled_weight: u64,
    asked: Counted,
}

impl Newcomer {
    /// Whether it is in the newcomers' place now.
    pub(crate) fn pooled(&self) -> bool {
        self.standing == Standing::Pooled
    }
}

/// The newcomers' place: how many, their weights, their requests, since
/// when it is occupied, and the graduations' time of arrival.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Pool {
    members: u64,
    weights: u64,
    asked: Counted,
    since: u64,
    graduated_tat: u64,
}

impl Pool {
    /// Whether it holds more newcomers than graduate together.
    pub(crate) fn crowded(&self) -> bool {
        self.members > SMALL_POOL
    }

    /// Its newcomers' weights together.
    pub(crate) fn weights(&self) -> u64 {
        self.weights
    }

    /// What the place weighs at `now`: 1, and one more every
    /// [`POOL_GROWTH_WINDOWS`] windows occupied, up to its newcomers'
    /// weights (nothing while empty).
    pub(crate) fn weight(&self, now: u64, window: u64) -> u64 {
        if self.members == 0 {
            return 0;
        }
        let grown = 1 + now.saturating_sub(self.since) / (POOL_GROWTH_WINDOWS * window);
        grown.min(self.weights).min(MAX_POOL_WEIGHT)
    }

    /// `gone`, an expired tenant, leaves the place if it was in it.
    pub(crate) fn leave(&mut self, gone: &Newcomer) {
        if gone.pooled() {
            self.members -= 1;
            self.weights -= gone.pooled_weight;
        }
    }

    /// Where `newcomer` (of `weight`) stands now: a new tenant joins the
    /// place (of trusted tenants, is one of its own at once); a newcomer
    /// is counted there, and graduates when it may. True when it
    /// graduates now.
    pub(crate) fn stand(
        &mut self,
        settings: &Settings,
        newcomer: &mut Newcomer,
        weight: u64,
        now: u64,
    ) -> bool {
        match newcomer.standing {
            Standing::New if settings.trusted => {
                newcomer.standing = Standing::Established;
                return true;
            }
            Standing::New => {
                newcomer.standing = Standing::Pooled;
                newcomer.since = now;
                if self.members == 0 {
                    self.since = now;
                }
                self.members += 1;
            }
            Standing::Pooled => self.weights -= newcomer.pooled_weight,
            Standing::Established => return false,
        }
        newcomer.pooled_weight = weight;
        self.weights += weight;
        newcomer.asked.count(now, settings.window);
        self.asked.count(now, settings.window);
        let graduates = now.saturating_sub(newcomer.since) >= settings.window / 4
            && self.graduates(settings, newcomer, now);
        if graduates {
            newcomer.standing = Standing::Established;
            self.members -= 1;
            self.weights -= weight;
        }
        graduates
    }

    /// Whether `newcomer`, here for a quarter window now, becomes a
    /// tenant of its own: while the place is small or it asks at least
    /// [`BUSY_TIMES`] the newcomers' mean rate, within the graduations'
    /// budget.
    fn graduates(&mut self, settings: &Settings, newcomer: &Newcomer, now: u64) -> bool {
        let window = settings.window;
        // Its rate (its requests over the part of the last window it has
        // been here, in 64ths) against the newcomers' mean (theirs over
        // the part the place has been occupied), in doubles, as the script
        // computes them, so that both round alike.
        let here = |since: u64| now.saturating_sub(since).min(window) * 64 / window;
        let asked = newcomer.asked.last_window(now, window);
        let busy = asked >= BUSY_SAMPLE * 1024
            && asked as f64 * self.members as f64 * here(self.since) as f64
                >= BUSY_TIMES as f64
                    * self.asked.last_window(now, window) as f64
                    * here(newcomer.since) as f64;
        let graduated_tat = self.graduated_tat.max(now) + window;
        let graduates =
            (self.members <= SMALL_POOL || busy) && graduated_tat - now <= SMALL_POOL * window;
        if graduates {
            self.graduated_tat = graduated_tat;
        }
        graduates
    }
}
