//! A tenant's pace: its GCRA at its share, and how far past its share
//! it asks.

use super::settings::Settings;

/// One request against a GCRA: its time of arrival after the request,
/// and whether that is within the depth.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pace {
    pub(super) tat: u64,
    depth: u64,
    now: u64,
    pub(super) within: bool,
}

impl Pace {
    /// At `interval` µs a request with `depth` µs of tolerance, from
    /// `tat`: a debt counts at most the depth (one left from a smaller
    /// share, or from borrowing).
    pub(super) fn new(interval: u64, depth: u64, tat: u64, now: u64) -> Self {
        let tat = tat.clamp(now, now + depth) + interval;
        Self {
            tat,
            depth,
            now,
            within: tat - now <= depth,
        }
    }

    /// Its time of arrival once admitted, at most the depth ahead.
    pub(super) fn kept(&self) -> u64 {
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
    pub(super) fn ask(&mut self, interval: u64, depth: u64, now: u64, pooled: bool) -> Ahead {
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
pub(super) struct Ahead {
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
    pub(super) fn room(&self, settings: &Settings) -> u64 {
        let room = settings.headroom * self.part / Demand::DEPTH;
        if self.hog {
            room
        } else {
            room.min(settings.headroom - settings.interval)
        }
    }
}
