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

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = i128::from(self.0) * 1_000_000;
        match time::OffsetDateTime::from_unix_timestamp_nanos(nanos) {
            Ok(t) => write!(
                f,
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute(),
                t.second(),
                t.millisecond()
            ),
            Err(_) => write!(f, "{}", self.0),
        }
    }
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
