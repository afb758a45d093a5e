//! A tenant's pace: its GCRA at its share (with what it keeps of its
//! unused share), and how far past its share it asks.

use super::settings::Settings;

/// One request against a GCRA: its time of arrival before and after the
/// request, and whether that is within the depth.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pace {
    from: u64,
    pub(super) tat: u64,
    depth: u64,
    now: u64,
    pub(super) within: bool,
}

impl Pace {
    /// At `interval` µs a request with `depth` µs of tolerance, from
    /// `tat`: a debt counts at most the depth (one left from a smaller
    /// share, or from borrowing), and the time the GCRA stood empty at
    /// most `behind` (what a tenant keeps of its unused share).
    pub(super) fn new(interval: u64, depth: u64, tat: u64, now: u64, behind: u64) -> Self {
        let from = tat.clamp(now.saturating_sub(behind), now + depth);
        let tat = from + interval;
        Self {
            from,
            tat,
            depth,
            now,
            within: tat.saturating_sub(now) <= depth,
        }
    }

    /// Whether the GCRA stood empty: the request spends what was left
    /// unused.
    pub(super) fn unused(&self) -> bool {
        self.from <= self.now
    }

    /// Its time of arrival once admitted, at most the depth ahead.
    pub(super) fn kept(&self) -> u64 {
        self.tat.min(self.now + self.depth)
    }

    /// Its time of arrival once refused within the depth: an `interval`
    /// of what was left unused is lost (none past `now`).
    pub(super) fn refused(&self, interval: u64) -> u64 {
        match self.from < self.now {
            true => (self.from + interval).min(self.now),
            false => self.from,
        }
    }
}

/// How far ahead of its share a tenant asks, admitted or not: a GCRA of
/// every request at the share's interval, its level in
/// [`DEPTH`](Self::DEPTH)ths of the share's depth (so that it means the
/// same when the share changes), held at most two depths ahead.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Demand {
    level: u64,
    at: u64,
}

impl Demand {
    /// A depth, in the level's units.
    const DEPTH: u64 = 1024;

    /// One more request at `now`, at a share of `interval` µs and `depth`
    /// µs: how far past a depth ahead the tenant is at `now`, drained to
    /// `now` and before this request counts (0 while it asks within its
    /// share and its depth's burst, all a further depth ahead). A tenant
    /// starts a depth ahead: a hog is past it from its second request,
    /// and one asking within its share never reaches it. A newcomer in a
    /// `crowded` place counts at least a third: made-up ids silent a
    /// while, their shares unused, come back behind established tenants
    /// asking within theirs.
    pub(super) fn ask(&mut self, interval: u64, depth: u64, now: u64, crowded: bool) -> Ahead {
        let step = depth.div_ceil(Self::DEPTH);
        self.level = if self.at == 0 {
            Self::DEPTH
        } else {
            let since = now.saturating_sub(self.at);
            self.level.saturating_sub(since.min(2 * depth) / step)
        };
        let past = self.level.saturating_sub(Self::DEPTH).min(Self::DEPTH);
        self.level = (self.level + interval / step).min(2 * Self::DEPTH);
        self.at = self.at.max(now);
        Ahead(if crowded {
            past.max(Self::DEPTH / 3)
        } else {
            past
        })
    }
}

/// How far ahead of its share a tenant asks ([`Demand::ask`]), in
/// [`Demand::DEPTH`]ths: how much of the headroom its requests within its
/// share leave.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ahead(u64);

impl Ahead {
    /// The room a request within its share leaves below the threshold,
    /// `H · e`; at most `H / 2` for one spending share its tenant left
    /// `unused` (its GCRA empty), so that tenants asking less far past
    /// their shares do not keep it from its own.
    pub(super) fn room(&self, settings: &Settings, unused: bool) -> u64 {
        let room = settings.headroom * self.0 / Demand::DEPTH;
        if unused {
            room.min(settings.headroom / 2)
        } else {
            room
        }
    }
}
