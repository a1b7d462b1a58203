//! The EU AI Act's deadline for reporting a serious incident to the market surveillance
//! authority (Art. 73), counted from when the incident was reported to Warden (the
//! deployer's awareness of it): 15 days in general (73(2)), 10 days when a person died
//! (73(4)), 2 days for a widespread infringement or a serious incident in critical
//! infrastructure (73(3)).

use serde::Serialize;
use utoipa::ToSchema;
use warden_shared::timestamp::Timestamp;

const DAY_MS: i64 = 86_400_000;

/// Which rule sets an incident's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grounds {
    pub involves_health_or_death: bool,
    pub widespread_infringement: bool,
    pub critical_infrastructure: bool,
}

impl Grounds {
    /// The days allowed and the rule's name; the shortest deadline that applies wins.
    pub fn days(self) -> (i64, &'static str) {
        if self.widespread_infringement || self.critical_infrastructure {
            (2, "art_73_3_widespread_or_critical_infrastructure")
        } else if self.involves_health_or_death {
            (10, "art_73_4_death")
        } else {
            (15, "art_73_2_general")
        }
    }

    pub fn due_at(self, reported_at: Timestamp) -> Timestamp {
        Timestamp::from_millis(reported_at.as_millis() + self.days().0 * DAY_MS)
    }
}

/// Where an incident stands against its deadline.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Reporting {
    pub deadline_days: i64,
    /// `art_73_2_general`, `art_73_4_death` or
    /// `art_73_3_widespread_or_critical_infrastructure`.
    pub basis: &'static str,
    #[schema(value_type = String, format = DateTime)]
    pub due_at: Timestamp,
    /// `pending` (not yet notified, in time), `overdue` (not notified, past due), `met`
    /// (notified in time) or `late` (notified after the deadline).
    pub status: &'static str,
    pub overdue: bool,
    /// Whole days left until the deadline (negative when past), while not notified.
    pub days_remaining: Option<i64>,
}

pub fn reporting(
    grounds: Grounds,
    reported_at: Timestamp,
    notified_at: Option<Timestamp>,
    now: Timestamp,
) -> Reporting {
    let (deadline_days, basis) = grounds.days();
    let due_at = grounds.due_at(reported_at);
    let due = due_at.as_millis();
    let status = match notified_at {
        Some(at) if at.as_millis() <= due => "met",
        Some(_) => "late",
        None if now.as_millis() > due => "overdue",
        None => "pending",
    };
    Reporting {
        deadline_days,
        basis,
        due_at,
        status,
        overdue: status == "overdue",
        days_remaining: notified_at
            .is_none()
            .then(|| (due - now.as_millis()).div_euclid(DAY_MS)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: Grounds = Grounds {
        involves_health_or_death: false,
        widespread_infringement: false,
        critical_infrastructure: false,
    };

    #[test]
    fn the_shortest_applicable_deadline_wins() {
        assert_eq!(NONE.days().0, 15);
        let death = Grounds {
            involves_health_or_death: true,
            ..NONE
        };
        assert_eq!(death.days().0, 10);
        let both = Grounds {
            critical_infrastructure: true,
            ..death
        };
        assert_eq!(both.days().0, 2);
    }

    #[test]
    fn status_follows_notification_and_time() {
        let reported = Timestamp::from_millis(0);
        let day = |d: i64| Timestamp::from_millis(d * DAY_MS);
        assert_eq!(reporting(NONE, reported, None, day(3)).status, "pending");
        assert_eq!(
            reporting(NONE, reported, None, day(3)).days_remaining,
            Some(12)
        );
        assert_eq!(reporting(NONE, reported, None, day(16)).status, "overdue");
        assert_eq!(
            reporting(NONE, reported, Some(day(14)), day(20)).status,
            "met"
        );
        assert_eq!(
            reporting(NONE, reported, Some(day(16)), day(20)).status,
            "late"
        );
    }
}
