//! Billing periods are calendar months in UTC; an upgrade is charged for the rest of the
//! current one, in proportion to the milliseconds left.

use time::{Date, Month, OffsetDateTime, Time};
use warden_shared::timestamp::Timestamp;

/// The period `[start, end)` that holds `at`.
pub fn of(at: Timestamp) -> (Timestamp, Timestamp) {
    let moment = OffsetDateTime::from_unix_timestamp_nanos(i128::from(at.as_millis()) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    let start = month_start(moment.year(), moment.month());
    let (year, month) = if moment.month() == Month::December {
        (moment.year() + 1, Month::January)
    } else {
        (moment.year(), moment.month().next())
    };
    (start, month_start(year, month))
}

fn month_start(year: i32, month: Month) -> Timestamp {
    let date = Date::from_calendar_date(year, month, 1).unwrap_or(Date::MIN);
    let nanos = date
        .with_time(Time::MIDNIGHT)
        .assume_utc()
        .unix_timestamp_nanos();
    Timestamp::from_millis(i64::try_from(nanos / 1_000_000).unwrap_or(0))
}

/// What moving from a plan costing `from_micros` to one costing `to_micros` a month costs
/// for the rest of the period holding `at`, in micro-dollars rounded to the cent.
pub fn prorated(from_micros: i64, to_micros: i64, at: Timestamp) -> i64 {
    let (start, end) = of(at);
    let length = i128::from(end.as_millis() - start.as_millis()).max(1);
    let left = i128::from(end.as_millis() - at.as_millis()).max(0);
    let difference = i128::from((to_micros - from_micros).max(0));
    let micros = difference * left / length;
    // Whole cents, rounded half up.
    let cents = (micros + 5_000) / 10_000;
    i64::try_from(cents * 10_000).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_calendar_months_and_proration_counts_what_is_left() {
        // 2026-11-16T00:00:00Z: 15 of November's 30 days are left.
        let mid = Timestamp::from_millis(1_794_787_200_000);
        let (start, end) = of(mid);
        assert_eq!(start.to_string(), "2026-11-01T00:00:00.000Z");
        assert_eq!(end.to_string(), "2026-12-01T00:00:00.000Z");
        assert_eq!(prorated(99_000_000, 499_000_000, mid), 200_000_000);
        let december = Timestamp::from_millis(1_796_083_200_000); // 2026-12-01
        assert_eq!(of(december).1.to_string(), "2027-01-01T00:00:00.000Z");
        assert_eq!(prorated(499_000_000, 99_000_000, mid), 0);
    }
}
