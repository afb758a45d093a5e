//! A capacity's numbers, fixed when it is built.

/// The longest window a capacity may have: with [`MAX_WEIGHT`](super::tenants::MAX_WEIGHT) it keeps
/// `interval · weight` exact in doubles.
pub(crate) const MAX_WINDOW_US: u64 = 86_400_000_000;

/// The capacity's depth holds at least this many requests, so that the
/// classes' thresholds and the headroom are whole requests apart at any
/// capacity.
pub(crate) const MIN_DEPTH_REQUESTS: u64 = 20;

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
    /// How many tenants are told apart; the rest share [`OVERFLOW`](super::OVERFLOW).
    pub max_tenants: usize,
    /// Tenant ids no client can make up: each tenant is one of its own
    /// from its first request, with no newcomers' place.
    pub trusted: bool,
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
        // Six requests at least, as the depth holds twenty.
        let headroom = depth * 3 / 10;
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
            trusted: false,
            fills,
            limit,
            window,
        }
    }

    /// These settings at `limit` with `fills`, all else kept (whether
    /// tenants are trusted too).
    pub(crate) fn rebuilt(&self, limit: u32, fills: [u8; 3]) -> Self {
        Self {
            trusted: self.trusted,
            ..Self::new(limit, self.window, fills, self.max_tenants)
        }
    }

    /// How many of its requests a tenant keeps of its unused share: as
    /// many as the headroom holds (six at least).
    pub(crate) fn kept_requests(&self) -> u64 {
        self.headroom / self.interval
    }

    /// Over how many windows the critical requests past their shares are
    /// counted: the depth's, at least one (below 20 requests a window, one
    /// window holds too few of them to tell their rate).
    pub(crate) fn reserved_windows(&self) -> u64 {
        self.depth.div_ceil(self.window).max(1)
    }
}
