//! Quotas: how much, per how long, with what burst.

use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;
use std::time::Duration;

use super::calendar::{Calendar, Period};
use crate::clock::micros::{in_largest_unit, Micros, Unit, UNITS};

/// The longest window a quota may have: 366 days.
pub const MAX_WINDOW: Duration = Duration::from_secs(366 * 24 * 3600);

/// The shortest window a quota may have: 1 ms. A shorter one would be
/// decided by how clocks and round trips jitter (servers' clocks agree to
/// about a millisecond, a decision on Redis takes longer), not by the
/// limit; for a high rate, give a larger limit over 1 s instead.
pub const MIN_WINDOW: Duration = Duration::from_millis(1);

/// The longest span of time one key's state may cover (`burst × interval`),
/// about 8.9 years. It keeps every timestamp below 2^53 microseconds, which
/// Lua numbers (Redis scripts) represent exactly.
pub(crate) const MAX_SPAN: Micros = Micros::new(1 << 48);

/// How many requests (or units of cost) are allowed per window, and for the
/// bucket algorithms how many may come at once.
///
/// Build one with [`Quota::per_second`] and friends, [`Quota::new`], or by
/// parsing (`"10/s burst 20"`). A quota is only a rate; the algorithm that
/// enforces it is chosen with the [`Limit`](crate::Limit) that holds it.
///
/// A [`Quota`] is validated when it is built, so a limiter never runs with a
/// zero limit, a zero window or a rate it cannot represent exactly in integer
/// microseconds. Quotas also parse from a human syntax:
///
/// ```
/// use std::time::Duration;
/// use tower_ratelimit::Quota;
///
/// let q: Quota = "10/s burst 20".parse().unwrap();
/// assert_eq!(q.limit(), 10);
/// assert_eq!(q.window(), Duration::from_secs(1));
/// assert_eq!(q.burst(), Some(20));
///
/// assert_eq!("100/min".parse::<Quota>().unwrap(), Quota::per_minute(100).unwrap());
/// assert_eq!("1000/hour".parse::<Quota>().unwrap().to_string(), "1000/h");
///
/// let err = "10/fortnight".parse::<Quota>().unwrap_err();
/// assert!(err.to_string().contains("unknown time unit \"fortnight\""));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: NonZeroU32,
    /// The window; for a calendar's, the longest of its periods.
    window: Micros,
    burst: Option<NonZeroU32>,
    calendar: Option<Calendar>,
}

impl Quota {
    /// `limit` per `window`.
    pub fn new(limit: u32, window: Duration) -> Result<Self, QuotaError> {
        let limit = NonZeroU32::new(limit).ok_or(QuotaError::ZeroLimit)?;
        if window.is_zero() {
            return Err(QuotaError::ZeroWindow);
        }
        if window < MIN_WINDOW {
            return Err(QuotaError::WindowTooShort(window));
        }
        if !window.subsec_nanos().is_multiple_of(1_000) {
            return Err(QuotaError::SubMicrosecondWindow(window));
        }
        if window > MAX_WINDOW {
            return Err(QuotaError::WindowTooLong(window));
        }
        let window = Micros::from(window);
        if u64::from(limit.get()) > window.as_u64() {
            return Err(QuotaError::RateTooFine {
                limit: limit.get(),
                window: window.into(),
            });
        }
        Ok(Self {
            limit,
            window,
            burst: None,
            calendar: None,
        })
    }

    /// `limit` per calendar week, Monday 00:00 to Monday 00:00 UTC (see
    /// [`Calendar`]; enforced as a fixed window).
    pub fn per_week(limit: u32) -> Result<Self, QuotaError> {
        Self::per_period(limit, Period::Week)
    }

    /// `limit` per calendar month, from 00:00 UTC of the 1st (or of the
    /// day [`starting_on_day`](Self::starting_on_day) sets) to the same of the next.
    ///
    /// ```
    /// use tower_ratelimit::Quota;
    /// let billing = Quota::per_month(50_000)?.starting_on_day(15)?.utc_offset(120)?;
    /// assert_eq!(billing.to_string(), "50000/month from 15 utc+02:00");
    /// assert_eq!(billing, "50000/month from 15 utc+02:00".parse()?);
    /// # Ok::<(), tower_ratelimit::quota::QuotaError>(())
    /// ```
    pub fn per_month(limit: u32) -> Result<Self, QuotaError> {
        Self::per_period(limit, Period::Month)
    }

    /// `limit` per calendar year, from 1 January 00:00 UTC.
    pub fn per_year(limit: u32) -> Result<Self, QuotaError> {
        Self::per_period(limit, Period::Year)
    }

    fn per_period(limit: u32, period: Period) -> Result<Self, QuotaError> {
        let calendar = Calendar::new(period);
        let quota = Self::new(limit, calendar.longest().into())?;
        Ok(Self {
            calendar: Some(calendar),
            ..quota
        })
    }

    /// This monthly quota's months start on `day` of the month (1 to 31;
    /// in a shorter month, on its last day): a billing period.
    pub fn starting_on_day(self, day: u8) -> Result<Self, QuotaError> {
        let calendar = self.calendar.and_then(|c| c.starting_on_day(day));
        self.with_calendar(
            calendar,
            "a month starts on a day from 1 to 31, and only a monthly quota has one",
        )
    }

    /// This calendar quota's days start `minutes` east of UTC (negative:
    /// west), at most 23:59 either way.
    pub fn utc_offset(self, minutes: i16) -> Result<Self, QuotaError> {
        let calendar = self.calendar.and_then(|c| c.offset(minutes));
        self.with_calendar(
            calendar,
            "an offset from UTC is at most 23:59, and only a week, month or year has one",
        )
    }

    /// This quota on `calendar`, or the error `problem` when there is none.
    fn with_calendar(self, calendar: Option<Calendar>, problem: &str) -> Result<Self, QuotaError> {
        match calendar {
            Some(calendar) => Ok(Self {
                calendar: Some(calendar),
                ..self
            }),
            None => Err(QuotaError::Calendar(format!("{self}: {problem}"))),
        }
    }

    /// The calendar its windows follow, for a weekly, monthly or yearly
    /// quota.
    pub fn calendar(&self) -> Option<Calendar> {
        self.calendar
    }

    /// The same quota with `limit` instead (and `burst`, if any): a share
    /// of it, or a scaled one.
    pub(crate) fn with_limit(self, limit: u32, burst: Option<u32>) -> Result<Self, QuotaError> {
        let scaled = Self::new(limit, self.window())?;
        let scaled = Self {
            calendar: self.calendar,
            ..scaled
        };
        match burst {
            Some(burst) => scaled.with_burst(burst),
            None => Ok(scaled),
        }
    }

    /// `limit` per second.
    pub fn per_second(limit: u32) -> Result<Self, QuotaError> {
        Self::new(limit, Duration::from_secs(1))
    }

    /// `limit` per minute.
    pub fn per_minute(limit: u32) -> Result<Self, QuotaError> {
        Self::new(limit, Duration::from_secs(60))
    }

    /// `limit` per hour.
    pub fn per_hour(limit: u32) -> Result<Self, QuotaError> {
        Self::new(limit, Duration::from_secs(3600))
    }

    /// `limit` per day.
    pub fn per_day(limit: u32) -> Result<Self, QuotaError> {
        Self::new(limit, Duration::from_secs(86_400))
    }

    /// Allow up to `burst` at once (bucket algorithms only: token bucket,
    /// leaky bucket, GCRA). Without it the burst equals the limit.
    pub fn with_burst(self, burst: u32) -> Result<Self, QuotaError> {
        let burst = NonZeroU32::new(burst).ok_or(QuotaError::ZeroBurst)?;
        let span = u64::from(burst.get()).checked_mul(self.emission_interval().as_u64());
        if span.is_none_or(|span| span > MAX_SPAN.as_u64()) {
            return Err(QuotaError::BurstTooLong {
                burst: burst.get(),
                quota: self,
            });
        }
        Ok(Self {
            burst: Some(burst),
            ..self
        })
    }

    /// Requests (or units of cost) allowed per window.
    pub fn limit(&self) -> u32 {
        self.limit.get()
    }

    /// The window the limit applies to; for a [calendar](Self::calendar)
    /// quota, the longest of its periods (31 days for a month).
    pub fn window(&self) -> Duration {
        self.window.into()
    }

    /// The burst set with [`Quota::with_burst`], if any.
    pub fn burst(&self) -> Option<u32> {
        self.burst.map(NonZeroU32::get)
    }

    /// The window, in the core's time.
    pub(crate) fn window_micros(&self) -> Micros {
        self.window
    }

    /// The bucket capacity: the burst if set, else the limit.
    pub(crate) fn capacity(&self) -> u32 {
        self.burst().unwrap_or(self.limit())
    }

    /// Time for one unit to come back, rounded up so the limiter never admits
    /// more than the quota says (at most one microsecond slower per unit).
    pub(crate) fn emission_interval(&self) -> Micros {
        Micros::new(self.window.as_u64().div_ceil(u64::from(self.limit.get())))
    }
}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Quota({self})")
    }
}

/// Written in the syntax [`FromStr`] reads: `10/s`, `100/5min`, `10/s burst 20`.
impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/", self.limit)?;
        match &self.calendar {
            Some(calendar) => write!(f, "{calendar}")?,
            None => write_window(f, self.window)?,
        }
        if let Some(burst) = self.burst {
            write!(f, " burst {burst}")?;
        }
        Ok(())
    }
}

/// Writes a window as the quota syntax does (`min`, `5min`, `90s`).
fn write_window(f: &mut impl fmt::Write, window: Micros) -> fmt::Result {
    match in_largest_unit(window) {
        (1, unit) => f.write_str(unit.name),
        (n, unit) => write!(f, "{n}{}", unit.name),
    }
}

impl FromStr for Quota {
    type Err = QuotaError;

    /// Reads `LIMIT/[N]UNIT [burst B]`, e.g. `10/s`, `100/min`, `1000/hour`,
    /// `5000/day`, `100/5m`, `10/s burst 20`. Units: `us`, `ms`, `s`, `min`
    /// (or `m`), `h`, `day` and their long forms.
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        Parser::new(input).quota()
    }
}

/// A small cursor over the input that reports errors with their byte offset.
struct Parser<'a> {
    input: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(input: &'a str) -> Self {
        Self { input, pos: 0 }
    }

    fn quota(mut self) -> Result<Quota, QuotaError> {
        self.skip_space();
        let (limit, limit_at) = self.number("a limit, like the 10 in \"10/s\"")?;
        self.skip_space();
        if !self.eat("/") {
            return Err(self.error("\"/\" between the limit and the window"));
        }
        self.skip_space();
        let count = if self.peek().is_some_and(|c| c.is_ascii_digit()) {
            let (count, count_at) = self.number("a window length")?;
            if count == 0 {
                return Err(self.error_at(count_at, "a window longer than zero"));
            }
            self.skip_space();
            count
        } else {
            1
        };
        let unit_at = self.pos;
        let unit = self.word();
        if let Some(period) = calendar_period(unit) {
            if count != 1 {
                return Err(
                    self.error_at(unit_at, "one calendar week, month or year (\"100/month\")")
                );
            }
            return self.calendar_quota(limit, limit_at, period);
        }
        let Some(Unit {
            micros: unit_us, ..
        }) = UNITS.iter().find(|u| u.names.contains(&unit))
        else {
            return Err(QuotaError::Syntax {
                input: self.input.to_owned(),
                at: unit_at,
                problem: if unit.is_empty() {
                    format!("expected a time unit ({UNIT_NAMES})")
                } else {
                    format!("unknown time unit {unit:?} (expected {UNIT_NAMES})")
                },
            });
        };
        let window_us = count
            .checked_mul(*unit_us)
            .filter(|us| *us <= Micros::from(MAX_WINDOW).as_u64())
            .ok_or_else(|| self.error_at(unit_at, "a window of at most 366 days"))?;
        let limit = u32::try_from(limit)
            .map_err(|_| self.error_at(limit_at, "a limit of at most 4294967295"))?;
        let mut quota = Quota::new(limit, Duration::from_micros(window_us))?;

        self.skip_space();
        if !self.at_end() {
            let word_at = self.pos;
            if self.word() != "burst" {
                return Err(self.error_at(word_at, "\"burst\" or the end of the quota"));
            }
            self.skip_space();
            let (burst, burst_at) = self.number("a burst size after \"burst\"")?;
            let burst = u32::try_from(burst)
                .map_err(|_| self.error_at(burst_at, "a burst of at most 4294967295"))?;
            quota = quota.with_burst(burst)?;
            self.skip_space();
            if !self.at_end() {
                return Err(self.error("the end of the quota"));
            }
        }
        Ok(quota)
    }

    /// The rest of a calendar quota: `[from DAY] [utc±HH:MM]`.
    fn calendar_quota(
        mut self,
        limit: u64,
        limit_at: usize,
        period: Period,
    ) -> Result<Quota, QuotaError> {
        let limit = u32::try_from(limit)
            .map_err(|_| self.error_at(limit_at, "a limit of at most 4294967295"))?;
        let mut quota = Quota::per_period(limit, period)?;
        self.skip_space();
        let mut word_at = self.pos;
        let mut word = self.word();
        if word == "from" {
            self.skip_space();
            let (day, day_at) = self.number("a day of the month after \"from\"")?;
            quota = u8::try_from(day)
                .ok()
                .and_then(|day| quota.starting_on_day(day).ok())
                .ok_or_else(|| {
                    self.error_at(
                        day_at,
                        "a day of the month from 1 to 31, for a monthly quota",
                    )
                })?;
            self.skip_space();
            word_at = self.pos;
            word = self.word();
        }
        if word == "utc" {
            let offset = self.take_while(|c| matches!(c, '+' | '-' | ':') || c.is_ascii_digit());
            let minutes = parse_offset(offset).ok_or_else(|| {
                self.error_at(word_at, "an offset from UTC like utc+02:00 or utc-05:30")
            })?;
            quota = quota.utc_offset(minutes)?;
            self.skip_space();
            word_at = self.pos;
            word = self.word();
        }
        if !word.is_empty() {
            return Err(self.error_at(
                word_at,
                "\"from DAY\", \"utc+HH:MM\" or the end of the quota",
            ));
        }
        Ok(quota)
    }

    fn number(&mut self, what: &str) -> Result<(u64, usize), QuotaError> {
        let start = self.pos;
        let digits = self.take_while(|c| c.is_ascii_digit());
        if digits.is_empty() {
            return Err(self.error(what));
        }
        let value = digits
            .parse()
            .map_err(|_| self.error_at(start, "a number that fits in 64 bits"))?;
        Ok((value, start))
    }

    fn word(&mut self) -> &'a str {
        self.take_while(|c| c.is_ascii_alphabetic())
    }

    fn take_while(&mut self, keep: impl Fn(char) -> bool) -> &'a str {
        let rest = &self.input[self.pos..];
        let len = rest.find(|c| !keep(c)).unwrap_or(rest.len());
        self.pos += len;
        &rest[..len]
    }

    fn skip_space(&mut self) {
        self.take_while(char::is_whitespace);
    }

    fn eat(&mut self, token: &str) -> bool {
        let found = self.input[self.pos..].starts_with(token);
        if found {
            self.pos += token.len();
        }
        found
    }

    fn peek(&self) -> Option<char> {
        self.input[self.pos..].chars().next()
    }

    fn at_end(&self) -> bool {
        self.pos == self.input.len()
    }

    fn error(&self, expected: &str) -> QuotaError {
        self.error_at(self.pos, expected)
    }

    fn error_at(&self, at: usize, expected: &str) -> QuotaError {
        QuotaError::Syntax {
            input: self.input.to_owned(),
            at,
            problem: format!("expected {expected}"),
        }
    }
}

/// The calendar period a unit names.
/// Every unit a quota's window may be in, as an error lists them.
const UNIT_NAMES: &str = "us, ms, s, min, h or day; or a calendar week, month or year, \
     as in 100/month from 15 utc+02:00";

fn calendar_period(unit: &str) -> Option<Period> {
    match unit {
        "week" | "weeks" | "wk" => Some(Period::Week),
        "month" | "months" | "mo" => Some(Period::Month),
        "year" | "years" | "yr" => Some(Period::Year),
        _ => None,
    }
}

/// `+02:00`, `-05:30`, `+2`: minutes east of UTC.
fn parse_offset(text: &str) -> Option<i16> {
    let (sign, rest) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return None,
    };
    let (hours, minutes) = rest.split_once(':').unwrap_or((rest, "0"));
    let all_digits =
        |s: &str| !s.is_empty() && s.len() <= 2 && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(hours) || !all_digits(minutes) {
        return None;
    }
    let (hours, minutes): (i16, i16) = (hours.parse().ok()?, minutes.parse().ok()?);
    (minutes < 60).then_some(sign * (hours * 60 + minutes))
}

/// Why a quota was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaError {
    /// The limit was zero: nothing could ever pass.
    ZeroLimit,
    /// The window was zero.
    ZeroWindow,
    /// The burst was zero: nothing could ever pass.
    ZeroBurst,
    /// The window is not a whole number of microseconds.
    SubMicrosecondWindow(Duration),
    /// The window is shorter than [`MIN_WINDOW`].
    WindowTooShort(Duration),
    /// The window is longer than [`MAX_WINDOW`].
    WindowTooLong(Duration),
    /// More than one unit per microsecond: too fine to enforce exactly.
    RateTooFine {
        /// The limit asked for.
        limit: u32,
        /// The window asked for.
        window: Duration,
    },
    /// `burst × (window / limit)` spans more time than a key's state may cover.
    BurstTooLong {
        /// The burst asked for.
        burst: u32,
        /// The quota it was added to.
        quota: Quota,
    },
    /// A calendar setting that does not fit its quota (a day of the
    /// month past 31, an offset past 23:59, either on a quota that is not
    /// a calendar's); says which.
    Calendar(String),
    /// The text could not be read as a quota.
    Syntax {
        /// The whole text.
        input: String,
        /// Byte offset of the problem in `input`.
        at: usize,
        /// What was wrong there.
        problem: String,
    },
}

impl fmt::Display for QuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroLimit => f.write_str("invalid quota: the limit must be at least 1"),
            Self::ZeroWindow => f.write_str("invalid quota: the window must be longer than zero"),
            Self::ZeroBurst => f.write_str("invalid quota: the burst must be at least 1"),
            Self::SubMicrosecondWindow(w) => write!(
                f,
                "invalid quota: the window {w:?} is not a whole number of microseconds"
            ),
            Self::WindowTooShort(w) => write!(
                f,
                "invalid quota: the window {w:?} is shorter than the minimum of 1ms (for a high rate, give its limit per second)"
            ),
            Self::WindowTooLong(w) => write!(
                f,
                "invalid quota: the window {w:?} is longer than the maximum of 366 days"
            ),
            Self::RateTooFine { limit, window } => write!(
                f,
                "invalid quota: {limit} per {window:?} is more than one per microsecond"
            ),
            Self::BurstTooLong { burst, quota } => write!(
                f,
                "invalid quota: a burst of {burst} at {quota} takes longer than 8.9 years to refill"
            ),
            Self::Calendar(problem) => write!(f, "invalid quota: {problem}"),
            Self::Syntax { input, at, problem } => {
                let near = input.get(*at..).unwrap_or("");
                if near.is_empty() {
                    write!(f, "invalid quota {input:?} at its end: {problem}")
                } else {
                    write!(
                        f,
                        "invalid quota {input:?} at {near:?} (byte {at}): {problem}"
                    )
                }
            }
        }
    }
}

impl std::error::Error for QuotaError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emission_interval_rounds_up() {
        assert_eq!(
            Quota::per_second(3).unwrap().emission_interval(),
            Micros::new(333_334)
        );
        assert_eq!(
            Quota::per_minute(100).unwrap().emission_interval(),
            Micros::from_millis(600)
        );
    }

    #[test]
    fn display_picks_the_largest_whole_unit() {
        let q = Quota::new(100, Duration::from_secs(300)).unwrap();
        assert_eq!(q.to_string(), "100/5min");
        let q = Quota::new(7, Duration::from_millis(1500)).unwrap();
        assert_eq!(q.to_string(), "7/1500ms");
    }
}
