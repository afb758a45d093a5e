//! Windows aligned to the calendar: weeks, months (from a day of the
//! month), years, in UTC or at a fixed offset from it.

use std::fmt;

use crate::clock::Micros;

const DAY_US: i64 = 86_400_000_000;

/// The longest offset from UTC a calendar may have: 23:59.
const MAX_OFFSET_MINUTES: i16 = 23 * 60 + 59;

/// A calendar period a quota's window follows: a week from Monday 00:00, a
/// month from 00:00 of a day of the month (the 1st unless a billing day is
/// set; a day past a month's end means its last day), a year from
/// 1 January; in UTC, or at a fixed offset east (`+`) or west of it.
///
/// A quota with one ([`Quota::per_month`](crate::Quota::per_month) and
/// friends, or `"50000/month from 15"`) is enforced as a fixed window whose
/// windows are the periods: months of 28 to 31 days are exact, and
/// `X-RateLimit-Reset` and the IETF `t` point at the period's real end.
///
/// ```
/// use tower_ratelimit::Quota;
///
/// let billing: Quota = "50000/month from 15 utc+02:00".parse()?;
/// let calendar = billing.calendar().unwrap();
/// assert_eq!(calendar.to_string(), "month from 15 utc+02:00");
/// # Ok::<(), tower_ratelimit::quota::QuotaError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Calendar {
    period: Period,
    /// The day of the month a month starts on (1 to 31); 1 otherwise.
    from_day: u8,
    /// Minutes east of UTC.
    offset_minutes: i16,
}

/// The length of a [`Calendar`]'s period.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Period {
    /// Monday 00:00 to the next Monday 00:00 (ISO weeks).
    Week,
    /// From a day of one month to that day of the next.
    Month,
    /// From 1 January to the next.
    Year,
}

impl Calendar {
    pub(crate) const fn new(period: Period) -> Self {
        Self {
            period,
            from_day: 1,
            offset_minutes: 0,
        }
    }

    /// Its months start on `day` (1 to 31; for a month shorter than that,
    /// its last day); `None` for a period other than a month or a day out
    /// of range.
    pub(crate) fn starting_on_day(self, day: u8) -> Option<Self> {
        (self.period == Period::Month && (1..=31).contains(&day)).then_some(Self {
            from_day: day,
            ..self
        })
    }

    /// Its days start at `minutes` east of UTC (negative: west); `None`
    /// past 23:59 either way.
    pub(crate) fn offset(self, minutes: i16) -> Option<Self> {
        (minutes.abs() <= MAX_OFFSET_MINUTES).then_some(Self {
            offset_minutes: minutes,
            ..self
        })
    }

    /// The period.
    pub fn period(&self) -> Period {
        self.period
    }

    /// The day of the month its months start on (1 for other periods).
    pub fn starts_on_day(&self) -> u8 {
        self.from_day
    }

    /// Its offset from UTC, in minutes east.
    pub fn utc_offset_minutes(&self) -> i16 {
        self.offset_minutes
    }

    /// The longest one of its periods can be: what stands for its window
    /// where one length is needed (the IETF `w`, how long state is kept).
    pub(crate) fn longest(&self) -> Micros {
        let days = match self.period {
            Period::Week => 7,
            Period::Month => 31,
            Period::Year => 366,
        };
        Micros::new(days * DAY_US as u64)
    }

    /// When the period that `now` (microseconds since the Unix epoch) falls
    /// in ends.
    pub(crate) fn end_after(&self, now: Micros) -> Micros {
        let offset = i64::from(self.offset_minutes) * 60_000_000;
        let local = i64::try_from(now.as_u64())
            .unwrap_or(i64::MAX)
            .saturating_add(offset);
        let day = local.div_euclid(DAY_US);
        let end_day = match self.period {
            // 1970-01-01 was a Thursday: day 0 is 3 days after a Monday.
            Period::Week => day - (day + 3).rem_euclid(7) + 7,
            Period::Year => {
                let (year, _, _) = civil_from_days(day);
                days_from_civil(year + 1, 1, 1)
            }
            Period::Month => {
                let (year, month, _) = civil_from_days(day);
                let this_start = self.month_start(year, month);
                if day >= this_start {
                    let (year, month) = if month == 12 {
                        (year + 1, 1)
                    } else {
                        (year, month + 1)
                    };
                    self.month_start(year, month)
                } else {
                    this_start
                }
            }
        };
        let end = end_day.saturating_mul(DAY_US).saturating_sub(offset);
        Micros::new(u64::try_from(end).unwrap_or(0))
    }

    /// The day (since the epoch) a month of this calendar starts in `month`
    /// of `year`.
    fn month_start(&self, year: i64, month: u32) -> i64 {
        let day = u32::from(self.from_day).min(days_in_month(year, month));
        days_from_civil(year, month, day)
    }

    /// The code the Redis script reads it by: the period (1 week, 2 month,
    /// 3 year), plus 4 × the day a month starts on, plus 128 × the offset
    /// in minutes shifted by 1440 (so it is never negative).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn code(&self) -> u64 {
        let period = match self.period {
            Period::Week => 1,
            Period::Month => 2,
            Period::Year => 3,
        };
        let offset = u64::try_from(i64::from(self.offset_minutes) + 1440).unwrap_or(0);
        period + 4 * u64::from(self.from_day) + 128 * offset
    }
}

/// Written as the quota syntax reads it: `week`, `month from 15`,
/// `year utc-05:00`.
impl fmt::Display for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.period {
            Period::Week => "week",
            Period::Month => "month",
            Period::Year => "year",
        })?;
        if self.from_day != 1 {
            write!(f, " from {}", self.from_day)?;
        }
        if self.offset_minutes != 0 {
            let sign = if self.offset_minutes < 0 { '-' } else { '+' };
            let minutes = self.offset_minutes.unsigned_abs();
            write!(f, " utc{sign}{:02}:{:02}", minutes / 60, minutes % 60)?;
        }
        Ok(())
    }
}

impl fmt::Debug for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Calendar({self})")
    }
}

/// Days in `month` (1 to 12) of `year`.
fn days_in_month(year: i64, month: u32) -> u32 {
    let (next_year, next_month) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    u32::try_from(days_from_civil(next_year, next_month, 1) - days_from_civil(year, month, 1))
        .unwrap_or(28)
}

/// Days since 1970-01-01 of a date of the proleptic Gregorian calendar
/// (the well-known era arithmetic: 400-year eras of 146,097 days, years
/// counted from March so that a leap day ends them).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (i64::from(month) + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day since 1970-01-01: (year, month 1–12, day 1–31).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month as u32, day as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Microseconds since the epoch of a UTC date and time.
    fn at(year: i64, month: u32, day: u32, hour: i64, minute: i64) -> Micros {
        let days = days_from_civil(year, month, day);
        Micros::new(((days * 24 + hour) * 60 + minute) as u64 * 60_000_000)
    }

    #[test]
    fn dates_round_trip_for_four_centuries() {
        for day in -1_000..(400 * 366) {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y, m, d), day);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }

    #[test]
    fn months_of_28_to_31_days_end_where_the_calendar_says() {
        let month = Calendar::new(Period::Month);
        assert_eq!(
            month.end_after(at(2024, 2, 10, 12, 0)),
            at(2024, 3, 1, 0, 0),
            "leap February"
        );
        assert_eq!(
            month.end_after(at(2025, 2, 28, 23, 59)),
            at(2025, 3, 1, 0, 0)
        );
        assert_eq!(month.end_after(at(2025, 4, 30, 0, 0)), at(2025, 5, 1, 0, 0));
        assert_eq!(
            month.end_after(at(2025, 12, 31, 23, 59)),
            at(2026, 1, 1, 0, 0)
        );
        assert_eq!(
            month.end_after(at(2026, 1, 1, 0, 0)),
            at(2026, 2, 1, 0, 0),
            "a period starts at its first microsecond"
        );
    }

    #[test]
    fn a_billing_month_runs_from_its_day() {
        let from_15 = Calendar::new(Period::Month).starting_on_day(15).unwrap();
        assert_eq!(
            from_15.end_after(at(2026, 11, 24, 9, 0)),
            at(2026, 12, 15, 0, 0)
        );
        assert_eq!(
            from_15.end_after(at(2026, 11, 14, 23, 59)),
            at(2026, 11, 15, 0, 0)
        );
        assert_eq!(
            from_15.end_after(at(2026, 12, 20, 0, 0)),
            at(2027, 1, 15, 0, 0)
        );
        // From the 31st: the last day of shorter months.
        let from_31 = Calendar::new(Period::Month).starting_on_day(31).unwrap();
        assert_eq!(
            from_31.end_after(at(2025, 1, 31, 0, 0)),
            at(2025, 2, 28, 0, 0)
        );
        assert_eq!(
            from_31.end_after(at(2024, 2, 29, 0, 0)),
            at(2024, 3, 31, 0, 0)
        );
        assert_eq!(
            from_31.end_after(at(2024, 4, 29, 0, 0)),
            at(2024, 4, 30, 0, 0)
        );
        assert!(Calendar::new(Period::Week).starting_on_day(3).is_none());
        assert!(Calendar::new(Period::Month).starting_on_day(32).is_none());
    }

    #[test]
    fn weeks_start_on_monday_and_years_on_the_first_of_january() {
        let week = Calendar::new(Period::Week);
        // 2026-11-24 is a Tuesday.
        assert_eq!(
            week.end_after(at(2026, 11, 24, 12, 0)),
            at(2026, 11, 30, 0, 0)
        );
        assert_eq!(
            week.end_after(at(2026, 11, 30, 0, 0)),
            at(2026, 12, 7, 0, 0)
        );
        assert_eq!(week.end_after(at(1970, 1, 1, 0, 0)), at(1970, 1, 5, 0, 0));
        let year = Calendar::new(Period::Year);
        assert_eq!(
            year.end_after(at(2024, 12, 31, 23, 59)),
            at(2025, 1, 1, 0, 0)
        );
    }

    #[test]
    fn an_offset_moves_midnight() {
        // UTC+02:00: the month ends at 22:00 UTC on its last day.
        let east = Calendar::new(Period::Month).offset(120).unwrap();
        assert_eq!(
            east.end_after(at(2026, 11, 30, 21, 59)),
            at(2026, 11, 30, 22, 0)
        );
        assert_eq!(
            east.end_after(at(2026, 11, 30, 22, 0)),
            at(2026, 12, 31, 22, 0)
        );
        let west = Calendar::new(Period::Year).offset(-300).unwrap();
        assert_eq!(west.end_after(at(2027, 1, 1, 3, 0)), at(2027, 1, 1, 5, 0));
        assert!(Calendar::new(Period::Year).offset(24 * 60).is_none());
        assert_eq!(east.to_string(), "month utc+02:00");
        assert_eq!(west.to_string(), "year utc-05:00");
    }
}
