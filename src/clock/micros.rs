//! Time in the core: whole microseconds, as a type of its own.

use std::fmt;
use std::ops::{Add, AddAssign};
use std::time::Duration;

/// A span of time, or an instant on a [`Clock`](crate::clock::Clock), in
/// whole microseconds.
///
/// The algorithms, the clocks and the backends count time in it: integer
/// arithmetic, exact, and the same in Rust as in the Redis scripts. The
/// public edges that people configure — quotas, `Retry-After`, shaping —
/// take and give [`Duration`]; `Micros` is what the explicit-time entry points
/// ([`ManualClock`](crate::clock::ManualClock), the algorithms'
/// `check` and `consume`) use, so that a replayed trace decides exactly as
/// production did.
///
/// ```
/// use std::time::Duration;
/// use tower_ratelimit::clock::Micros;
///
/// let t = Micros::from_millis(1_500);
/// assert_eq!(t.as_u64(), 1_500_000);
/// assert_eq!(Duration::from(t), Duration::from_millis(1_500));
/// assert_eq!(Micros::from(Duration::from_nanos(2_999)), Micros::new(2)); // truncated
/// assert_eq!(t.as_secs_ceil(), 2);
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Micros(u64);

impl Micros {
    /// No time at all; also the epoch of a clock.
    pub const ZERO: Self = Self(0);
    /// The largest representable time.
    pub const MAX: Self = Self(u64::MAX);

    /// `us` microseconds.
    #[inline]
    pub const fn new(us: u64) -> Self {
        Self(us)
    }

    /// `ms` milliseconds (saturating).
    #[inline]
    pub const fn from_millis(ms: u64) -> Self {
        Self(ms.saturating_mul(1_000))
    }

    /// `secs` seconds (saturating).
    #[inline]
    pub const fn from_secs(secs: u64) -> Self {
        Self(secs.saturating_mul(1_000_000))
    }

    /// The count of microseconds.
    #[inline]
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// Whole seconds, rounded up: what `Retry-After` and the reset headers say.
    #[inline]
    pub const fn as_secs_ceil(self) -> u64 {
        self.0.div_ceil(1_000_000)
    }

    /// `self − earlier`, or zero if `earlier` is later.
    #[inline]
    pub const fn saturating_sub(self, earlier: Self) -> Self {
        Self(self.0.saturating_sub(earlier.0))
    }

    /// `self + other`, or [`Micros::MAX`] on overflow.
    #[inline]
    pub const fn saturating_add(self, other: Self) -> Self {
        Self(self.0.saturating_add(other.0))
    }
}

/// Sums that cannot overflow in the core: every time there is below 2^53
/// (quotas bound windows and spans; clocks count from 1970).
impl Add for Micros {
    type Output = Self;

    #[inline]
    fn add(self, other: Self) -> Self {
        Self(self.0 + other.0)
    }
}

impl AddAssign for Micros {
    #[inline]
    fn add_assign(&mut self, other: Self) {
        self.0 += other.0;
    }
}

/// Whole microseconds of `d`, truncated; saturating at [`Micros::MAX`].
impl From<Duration> for Micros {
    #[inline]
    fn from(d: Duration) -> Self {
        Self(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
    }
}

impl From<Micros> for Duration {
    #[inline]
    fn from(us: Micros) -> Self {
        Duration::from_micros(us.0)
    }
}

impl fmt::Debug for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}µs", self.0)
    }
}

/// A time unit: the names the quota syntax reads, its length, and how it
/// is written in a quota (`min`) and in compact form (`m`, as in a 429 body).
pub(crate) struct Unit {
    pub(crate) names: &'static [&'static str],
    pub(crate) micros: u64,
    pub(crate) name: &'static str,
    pub(crate) short: &'static str,
}

const SEC: u64 = 1_000_000;

/// The time units, largest first: the one table of them.
pub(crate) const UNITS: &[Unit] = &[
    Unit {
        names: &["d", "day", "days"],
        micros: 86_400 * SEC,
        name: "day",
        short: "d",
    },
    Unit {
        names: &["h", "hr", "hour", "hours"],
        micros: 3_600 * SEC,
        name: "h",
        short: "h",
    },
    Unit {
        names: &["m", "min", "mins", "minute", "minutes"],
        micros: 60 * SEC,
        name: "min",
        short: "m",
    },
    Unit {
        names: &["s", "sec", "secs", "second", "seconds"],
        micros: SEC,
        name: "s",
        short: "s",
    },
    Unit {
        names: &["ms", "millis", "millisecond", "milliseconds"],
        micros: 1_000,
        name: "ms",
        short: "ms",
    },
    Unit {
        names: &["us", "micros", "microsecond", "microseconds"],
        micros: 1,
        name: "us",
        short: "us",
    },
];

/// A span as a count of the largest unit that divides it.
pub(crate) fn in_largest_unit(span: Micros) -> (u64, &'static Unit) {
    let unit = UNITS
        .iter()
        .find(|u| span.0.is_multiple_of(u.micros))
        .unwrap_or(&UNITS[UNITS.len() - 1]);
    (span.0 / unit.micros, unit)
}

/// A span written `90s`, `5min`, `1 h` (a whole number and a unit of
/// [`UNITS`]), or `None`.
#[cfg_attr(not(feature = "config"), allow(dead_code))]
pub(crate) fn parse_span(text: &str) -> Option<Micros> {
    let text = text.trim();
    let digits = text.find(|c: char| !c.is_ascii_digit())?;
    let count: u64 = text[..digits].parse().ok()?;
    let unit = text[digits..].trim_start();
    let unit = UNITS.iter().find(|u| u.names.contains(&unit))?;
    count.checked_mul(unit.micros).map(Micros)
}

/// A span as `1s`, `1m`, `5m`, `1h`, `1d`, `1500ms`.
pub(crate) fn compact(span: Micros) -> String {
    let (n, unit) = in_largest_unit(span);
    format!("{n}{}", unit.short)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_compact() {
        assert_eq!(compact(Micros::from_secs(60)), "1m");
        assert_eq!(compact(Micros::from_secs(300)), "5m");
        assert_eq!(compact(Micros::from_millis(1_500)), "1500ms");
        assert_eq!(compact(Micros::from_secs(86_400)), "1d");
    }

    #[test]
    fn spans_parse() {
        assert_eq!(parse_span("90s"), Some(Micros::from_secs(90)));
        assert_eq!(parse_span(" 5 min"), Some(Micros::from_secs(300)));
        assert_eq!(parse_span("1h"), Some(Micros::from_secs(3600)));
        assert_eq!(parse_span("h"), None);
        assert_eq!(parse_span("5"), None);
        assert_eq!(parse_span("5 fortnights"), None);
        assert_eq!(parse_span("99999999999999999999d"), None);
    }

    #[test]
    fn durations_convert_both_ways() {
        assert_eq!(Micros::from(Duration::MAX), Micros::MAX);
        assert_eq!(Micros::from(Duration::from_secs(3)), Micros::from_secs(3));
        assert_eq!(Micros::from_secs(u64::MAX), Micros::MAX);
        assert_eq!(Micros::new(1).as_secs_ceil(), 1);
        assert_eq!(Micros::ZERO.as_secs_ceil(), 0);
    }
}
