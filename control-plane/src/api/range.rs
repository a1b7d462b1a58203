//! Time ranges of the API's views (cost, audit trail, oversight, proxy stats): parsing
//! `from` / `to`, period starts (`month_start`: where monthly figures start), buckets.
//!
//! The ledger's rollups are hourly, so ranges resolve to whole hours: `from` is rounded
//! down to its hour and `to` up. A bare date (`2026-11-01`) means that whole UTC day, so
//! `to=2026-11-30` includes the 30th.

use serde::Deserialize;
use time::{Date, Duration, Time};
use warden_shared::timestamp::Timestamp;

use crate::error::ApiError;
pub use crate::ledger::DAY_MS;
use crate::ledger::{start_of_day, HOUR_MS};

const WEEK_MS: i64 = 7 * DAY_MS;
/// 1970-01-05 was a Monday: weeks start on Mondays (ISO 8601).
const FIRST_MONDAY_MS: i64 = 4 * DAY_MS;
/// The longest range any cost view accepts.
pub const MAX_RANGE_MS: i64 = 400 * DAY_MS;

/// A half-open range `[from, to)` of whole hours, in Unix milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub from: i64,
    pub to: i64,
}

impl Range {
    /// Splits the range into the whole UTC days inside it and the hours before and after
    /// them, so a view can read daily rollups for the middle and hourly ones at the edges.
    /// Any part may be empty (`from == to`).
    pub fn split_days(self) -> DaySplit {
        let first_day = match self.from.rem_euclid(DAY_MS) {
            0 => self.from,
            rest => self.from - rest + DAY_MS,
        };
        let last_day = start_of_day(self.to);
        if first_day > last_day {
            return DaySplit {
                head: self,
                days: Range {
                    from: self.to,
                    to: self.to,
                },
                tail: Range {
                    from: self.to,
                    to: self.to,
                },
            };
        }
        DaySplit {
            head: Range {
                from: self.from,
                to: first_day,
            },
            days: Range {
                from: first_day,
                to: last_day,
            },
            tail: Range {
                from: last_day,
                to: self.to,
            },
        }
    }
}

/// A range cut at midnights: see [`Range::split_days`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DaySplit {
    pub head: Range,
    pub days: Range,
    pub tail: Range,
}

impl DaySplit {
    /// Cuts the whole days at month starts (UTC): the days before the first month start
    /// in them, the whole months from there, and the days of the month the range ends in
    /// (from its start). When no month starts inside, the days are all `head`.
    pub fn months(self) -> MonthSplit {
        let Range { from, to } = self.days;
        let first_month = match Timestamp::from_millis(from).month_start() {
            start if start == from => from,
            // 31 days past a day of a month is always in the next month.
            _ => Timestamp::from_millis(from + 31 * DAY_MS).month_start(),
        };
        if first_month >= to {
            let empty = Range { from: to, to };
            return MonthSplit {
                head: self.days,
                months: empty,
                last: empty,
            };
        }
        let last_month = Timestamp::from_millis(to).month_start();
        MonthSplit {
            head: Range {
                from,
                to: first_month,
            },
            months: Range {
                from: first_month,
                to: last_month,
            },
            last: Range {
                from: last_month,
                to,
            },
        }
    }
}

/// Whole days cut at month starts: see [`DaySplit::months`]. `last` may be empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonthSplit {
    pub head: Range,
    pub months: Range,
    pub last: Range,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    Day,
    Week,
    Month,
}

impl Period {
    pub const fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
        }
    }

    /// The start of the period that contains `now`.
    pub fn start(self, now: Timestamp) -> i64 {
        let ms = now.as_millis();
        match self {
            Period::Day => start_of_day(ms),
            Period::Week => week_start(ms),
            Period::Month => Timestamp::from_millis(ms).month_start(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Granularity {
    Hour,
    Day,
    Week,
}

impl Granularity {
    /// The start of the bucket containing `ms`.
    pub fn bucket(self, ms: i64) -> i64 {
        match self {
            Granularity::Hour => ms - ms.rem_euclid(HOUR_MS),
            Granularity::Day => start_of_day(ms),
            Granularity::Week => week_start(ms),
        }
    }

    pub fn step(self) -> i64 {
        match self {
            Granularity::Hour => HOUR_MS,
            Granularity::Day => DAY_MS,
            Granularity::Week => WEEK_MS,
        }
    }
}

fn week_start(ms: i64) -> i64 {
    ms - (ms - FIRST_MONDAY_MS).rem_euclid(WEEK_MS)
}

/// Parses a `from`-style value: an RFC 3339 date-time, or a date meaning its midnight.
pub fn parse_start(field: &str, text: &str) -> Result<i64, ApiError> {
    parse(field, text, false)
}

/// Parses a `to`-style value: an RFC 3339 date-time, or a date meaning the end of that day.
pub fn parse_end(field: &str, text: &str) -> Result<i64, ApiError> {
    parse(field, text, true)
}

fn parse(field: &str, text: &str, end_of_day: bool) -> Result<i64, ApiError> {
    if let Some(at) = Timestamp::parse_rfc3339(text) {
        return Ok(at.as_millis());
    }
    let format = time::macros::format_description!("[year]-[month]-[day]");
    let date = Date::parse(text, &format).map_err(|_| {
        ApiError::validation(
            field,
            format!("{field}: expected an ISO 8601 date (2026-11-01) or date-time (2026-11-01T12:00:00Z)"),
        )
    })?;
    let date = if end_of_day {
        date.checked_add(Duration::days(1)).unwrap_or(date)
    } else {
        date
    };
    Ok(date.with_time(Time::MIDNIGHT).assume_utc().unix_timestamp() * 1000)
}

/// Builds the hour-aligned range and checks its order and length.
pub fn resolve(from: i64, to: i64) -> Result<Range, ApiError> {
    let from = from - from.rem_euclid(HOUR_MS);
    let to = match to.rem_euclid(HOUR_MS) {
        0 => to,
        rest => to - rest + HOUR_MS,
    };
    if to <= from {
        return Err(ApiError::validation("to", "to: must be after from"));
    }
    if to - from > MAX_RANGE_MS {
        return Err(ApiError::validation(
            "from",
            "from: the range may span at most 400 days",
        ));
    }
    Ok(Range { from, to })
}

/// The start of the calendar month (UTC) containing `now`: where `monthly_cost_usd` of
/// teams and tenants starts counting.
pub fn month_start(now: Timestamp) -> i64 {
    Period::Month.start(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_and_buckets_align_to_utc_calendar() {
        // 2026-11-22T15:41:01.123Z is a Sunday.
        let now = Timestamp::from_millis(1_795_362_061_123);
        assert_eq!(
            Timestamp::from_millis(Period::Day.start(now)).to_string(),
            "2026-11-22T00:00:00.000Z"
        );
        assert_eq!(
            Timestamp::from_millis(Period::Week.start(now)).to_string(),
            "2026-11-16T00:00:00.000Z"
        );
        assert_eq!(
            Timestamp::from_millis(Period::Month.start(now)).to_string(),
            "2026-11-01T00:00:00.000Z"
        );
        assert_eq!(
            Timestamp::from_millis(Granularity::Hour.bucket(now.as_millis())).to_string(),
            "2026-11-22T15:00:00.000Z"
        );
    }

    #[test]
    fn whole_days_split_at_month_starts() {
        let at = |text: &str| Timestamp::parse_rfc3339(text).unwrap().as_millis();
        let range = |from: &str, to: &str| Range {
            from: at(from),
            to: at(to),
        };
        // 29 August to the end of 27 November: three days, September and October, and
        // November's days.
        let split = range("2026-08-29T00:00:00Z", "2026-11-28T00:00:00Z")
            .split_days()
            .months();
        assert_eq!(
            split.head,
            range("2026-08-29T00:00:00Z", "2026-09-01T00:00:00Z")
        );
        assert_eq!(
            split.months,
            range("2026-09-01T00:00:00Z", "2026-11-01T00:00:00Z")
        );
        assert_eq!(
            split.last,
            range("2026-11-01T00:00:00Z", "2026-11-28T00:00:00Z")
        );
        // A whole month is one month and nothing else.
        let october = range("2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z")
            .split_days()
            .months();
        assert_eq!(
            october.months,
            range("2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z")
        );
        assert_eq!(october.head.from, october.head.to);
        assert_eq!(october.last.from, october.last.to);
        // Within one month (not from its start), every day is in the head.
        let inside = range("2026-11-03T00:00:00Z", "2026-11-20T00:00:00Z")
            .split_days()
            .months();
        assert_eq!(
            inside.head,
            range("2026-11-03T00:00:00Z", "2026-11-20T00:00:00Z")
        );
        assert_eq!(inside.months.from, inside.months.to);
        assert_eq!(inside.last.from, inside.last.to);
        // From a month's start to a day inside it: all of it is the last month's.
        let month_to_date = range("2026-11-01T00:00:00Z", "2026-11-28T00:00:00Z")
            .split_days()
            .months();
        assert_eq!(month_to_date.head.from, month_to_date.head.to);
        assert_eq!(month_to_date.months.from, month_to_date.months.to);
        assert_eq!(
            month_to_date.last,
            range("2026-11-01T00:00:00Z", "2026-11-28T00:00:00Z")
        );
    }

    #[test]
    fn a_range_splits_into_edge_hours_and_whole_days() {
        let day = |d: i64| d * DAY_MS;
        let split = Range {
            from: day(3) + 5 * HOUR_MS,
            to: day(6) + 2 * HOUR_MS,
        }
        .split_days();
        assert_eq!(
            split.head,
            Range {
                from: day(3) + 5 * HOUR_MS,
                to: day(4)
            }
        );
        assert_eq!(
            split.days,
            Range {
                from: day(4),
                to: day(6)
            }
        );
        assert_eq!(
            split.tail,
            Range {
                from: day(6),
                to: day(6) + 2 * HOUR_MS
            }
        );
        let aligned = Range {
            from: day(1),
            to: day(2),
        }
        .split_days();
        assert_eq!(
            aligned.days,
            Range {
                from: day(1),
                to: day(2)
            }
        );
        assert_eq!(aligned.head.from, aligned.head.to);
        assert_eq!(aligned.tail.from, aligned.tail.to);
        let within = Range {
            from: day(1) + HOUR_MS,
            to: day(1) + 3 * HOUR_MS,
        };
        let split = within.split_days();
        assert_eq!(split.head, within);
        assert_eq!(split.days.from, split.days.to);
        assert_eq!(split.tail.from, split.tail.to);
        let across_midnight = Range {
            from: day(1) + HOUR_MS,
            to: day(2) + HOUR_MS,
        };
        let split = across_midnight.split_days();
        assert_eq!(
            split.head,
            Range {
                from: day(1) + HOUR_MS,
                to: day(2)
            }
        );
        assert_eq!(split.days.from, split.days.to);
        assert_eq!(
            split.tail,
            Range {
                from: day(2),
                to: day(2) + HOUR_MS
            }
        );
    }

    #[test]
    fn dates_mean_whole_days_and_bad_text_is_a_422() {
        let from = parse_start("from", "2026-11-01").ok();
        let to = parse_end("to", "2026-11-01").ok();
        assert_eq!(to.zip(from).map(|(to, from)| to - from), Some(DAY_MS));
        assert!(parse_start("from", "2026-13-01").is_err());
        assert!(parse_start("from", "yesterday").is_err());
        assert!(resolve(10 * HOUR_MS, 5 * HOUR_MS).is_err());
        assert_eq!(
            resolve(HOUR_MS + 5, 2 * HOUR_MS + 1).ok(),
            Some(Range {
                from: HOUR_MS,
                to: 3 * HOUR_MS
            })
        );
    }
}
