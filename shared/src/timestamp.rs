//! Timestamps as Unix milliseconds, rendered as ISO 8601 UTC.
//!
//! Both planes and both database backends keep time as `i64` milliseconds since the Unix
//! epoch: one representation that sorts, subtracts and buckets the same everywhere. Only
//! the API boundary turns it into text such as `2026-11-22T15:41:01.123Z`.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time, in milliseconds since the Unix epoch (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

impl Timestamp {
    pub const fn from_millis(ms: i64) -> Self {
        Timestamp(ms)
    }

    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// The first midnight (UTC) of this instant's calendar month, in Unix milliseconds:
    /// the start of a monthly budget's period.
    pub fn month_start(self) -> i64 {
        const DAY_MS: i64 = 86_400_000;
        let day_start = self.0 - self.0.rem_euclid(DAY_MS);
        match time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(self.0) * 1_000_000) {
            Ok(at) => day_start - (i64::from(at.day()) - 1) * DAY_MS,
            Err(_) => day_start,
        }
    }

    /// Parses an RFC 3339 / ISO 8601 date-time with an offset (`Z` or `+01:00`).
    pub fn parse_rfc3339(text: &str) -> Option<Self> {
        let parsed =
            time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
                .ok()?;
        i64::try_from(parsed.unix_timestamp_nanos() / 1_000_000)
            .ok()
            .map(Timestamp)
    }
}

impl Timestamp {
    /// `YYYY-MM-DDTHH:MM:SS.mmmZ`, for years 0 to 9999 (`None` outside them).
    ///
    /// Written digit by digit from the civil date of the day number: every usage
    /// record the proxy sends and every time the API answers passes through here, and
    /// the calendar conversion and seven padded `fmt` integers it replaced cost about
    /// 25 times as much.
    pub fn rfc3339_bytes(self) -> Option<[u8; 24]> {
        const DAY_MS: i64 = 86_400_000;
        let (year, month, day) = civil_from_days(self.0.div_euclid(DAY_MS));
        let year = u32::try_from(year).ok().filter(|y| *y <= 9999)?;
        let ms_of_day = u32::try_from(self.0.rem_euclid(DAY_MS)).ok()?;
        let mut out = *b"0000-00-00T00:00:00.000Z";
        let mut put = |at: usize, digits: usize, value: u32| {
            let mut value = value;
            for slot in out[at..at + digits].iter_mut().rev() {
                *slot = b'0' + (value % 10) as u8;
                value /= 10;
            }
        };
        put(0, 4, year);
        put(5, 2, month);
        put(8, 2, day);
        put(11, 2, ms_of_day / 3_600_000);
        put(14, 2, ms_of_day / 60_000 % 60);
        put(17, 2, ms_of_day / 1_000 % 60);
        put(20, 3, ms_of_day % 1_000);
        Some(out)
    }
}

/// The proleptic Gregorian date of a day number (days since 1970-01-01): Howard
/// Hinnant's `civil_from_days`, exact for every `i64` day this type can name.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097); // [0, 146096]
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153; // March = 0
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    // Both are small and positive by construction.
    (year, month as u32, day as u32)
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(text) = self.rfc3339_bytes() {
            return f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?);
        }
        match calendar_text(self.0) {
            Some(text) => f.write_str(&text),
            None => write!(f, "{}", self.0),
        }
    }
}

/// The same text through the `time` crate's calendar, which also names years before 0
/// (`-001-...`); `None` beyond its range (years past ±9999).
fn calendar_text(ms: i64) -> Option<String> {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()?;
    Some(format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    ))
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Timestamp::parse_rfc3339(&text).ok_or_else(|| {
            serde::de::Error::custom("expected an ISO 8601 date-time such as 2026-01-31T12:00:00Z")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_month_starts_at_its_first_midnight_utc() {
        let at = |text: &str| Timestamp::parse_rfc3339(text).unwrap();
        let first = at("2026-11-01T00:00:00Z").as_millis();
        assert_eq!(at("2026-11-23T17:05:00Z").month_start(), first);
        assert_eq!(at("2026-11-01T00:00:00Z").month_start(), first);
        assert_eq!(
            at("2026-10-31T23:59:59.999Z").month_start(),
            at("2026-10-01T00:00:00Z").as_millis()
        );
        assert_eq!(
            at("2024-02-29T12:00:00Z").month_start(),
            at("2024-02-01T00:00:00Z").as_millis()
        );
    }

    /// The digit-by-digit rendering against the `time` crate's calendar, every 29 days
    /// and some hours from 0000 to 9999 (so every day of the month and time of day comes
    /// round), and at the edges.
    #[test]
    fn renders_every_day_as_the_calendar_does() {
        let format = |ms: i64| calendar_text(ms).expect("in the calendar's range");
        let first = -62_167_219_200_000; // 0000-01-01T00:00:00.000Z
        let last = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z
        let mut checked = 0;
        let mut ms = first;
        while ms <= last {
            assert_eq!(Timestamp(ms).to_string(), format(ms), "{ms}");
            ms += 29 * 86_400_000 + 3_723_457; // 29 days and 1 h 2 min 3.457 s
            checked += 1;
        }
        assert!(checked > 120_000);
        for ms in [first, first + 1, -1, 0, 1, 951_782_400_000, last - 1, last] {
            assert_eq!(Timestamp(ms).to_string(), format(ms), "{ms}");
        }
        assert_eq!(Timestamp(first - 1).rfc3339_bytes(), None);
        assert_eq!(Timestamp(last + 1).rfc3339_bytes(), None);
        // Beyond the calendar's range, as before: the milliseconds themselves.
        assert_eq!(Timestamp(last + 1).to_string(), (last + 1).to_string());
        assert_eq!(Timestamp(first - 1).to_string(), format(first - 1));
    }

    #[test]
    fn renders_iso_8601_utc_and_parses_back() {
        let t = Timestamp::from_millis(1_795_362_061_123);
        let text = t.to_string();
        assert_eq!(text, "2026-11-22T15:41:01.123Z");
        assert_eq!(Timestamp::parse_rfc3339(&text), Some(t));
        assert_eq!(
            Timestamp::parse_rfc3339("2026-11-22T16:41:01.123+01:00"),
            Some(t)
        );
        assert_eq!(Timestamp::parse_rfc3339("yesterday"), None);
    }
}
