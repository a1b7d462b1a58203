//! The events channels can subscribe to, each raised by an audit event (so an event is
//! delivered exactly when its change committed), with its severity and, for an event
//! that ends another's condition, the event it resolves.

/// How urgent an event is; mapped to PagerDuty's severities and shown in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Info,
    Warning,
    Error,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
            Severity::Critical => "critical",
        }
    }
}

/// One kind of event channels can receive.
#[derive(Debug)]
pub struct EventKind {
    /// The name channels list in `events`.
    pub name: &'static str,
    /// The audit event types that raise it.
    pub raised_by: &'static [&'static str],
    /// A person's title for it.
    pub title: &'static str,
    pub severity: Severity,
    /// The event whose condition this one ends, for the same target (an unblock ends a
    /// block): PagerDuty resolves the incident the other opened, and a channel that
    /// subscribes to the other receives this one too.
    pub resolves: Option<&'static str>,
}

/// Every event a channel can subscribe to.
pub const EVENTS: &[EventKind] = &[
    EventKind {
        name: "agent.registered",
        raised_by: &["agent.registered"],
        title: "Agent registered",
        severity: Severity::Info,
        resolves: None,
    },
    EventKind {
        name: "agent.deleted",
        raised_by: &["agent.deleted"],
        title: "Agent deleted",
        severity: Severity::Info,
        resolves: None,
    },
    EventKind {
        name: "agent.blocked",
        raised_by: &["agent.blocked"],
        title: "Agent blocked (kill switch)",
        severity: Severity::Critical,
        resolves: None,
    },
    EventKind {
        name: "agent.unblocked",
        raised_by: &["agent.unblocked"],
        title: "Agent unblocked",
        severity: Severity::Info,
        resolves: Some("agent.blocked"),
    },
    EventKind {
        name: "agent.quarantined",
        raised_by: &["agent.quarantined"],
        title: "Agent quarantined",
        severity: Severity::Error,
        resolves: None,
    },
    EventKind {
        name: "agent.quarantine_released",
        raised_by: &["agent.quarantine_released"],
        title: "Agent released from quarantine",
        severity: Severity::Info,
        resolves: Some("agent.quarantined"),
    },
    EventKind {
        name: "policy.violated",
        raised_by: &["policy.violated"],
        title: "Policy violated",
        severity: Severity::Warning,
        resolves: None,
    },
    EventKind {
        name: "approval.requested",
        raised_by: &["approval.requested"],
        title: "Approval requested",
        severity: Severity::Warning,
        resolves: None,
    },
    EventKind {
        name: "approval.decided",
        raised_by: &["approval.approved", "approval.denied"],
        title: "Approval decided",
        severity: Severity::Info,
        resolves: Some("approval.requested"),
    },
    EventKind {
        name: "approval.expired",
        raised_by: &["approval.expired"],
        title: "Approval expired undecided",
        severity: Severity::Warning,
        resolves: Some("approval.requested"),
    },
    EventKind {
        name: "budget.warning",
        raised_by: &["budget.warn_threshold_reached"],
        title: "Budget warning threshold reached",
        severity: Severity::Warning,
        resolves: None,
    },
    EventKind {
        name: "budget.exceeded",
        raised_by: &["budget.block_threshold_reached"],
        title: "Budget exceeded: requests are blocked",
        severity: Severity::Critical,
        resolves: None,
    },
    EventKind {
        name: "anomaly.detected",
        raised_by: &["anomaly.detected"],
        title: "Anomaly detected",
        severity: Severity::Error,
        resolves: None,
    },
    EventKind {
        name: "anomaly.resolved",
        raised_by: &["anomaly.resolved"],
        title: "Anomaly resolved",
        severity: Severity::Info,
        resolves: Some("anomaly.detected"),
    },
    EventKind {
        name: "incident.created",
        raised_by: &["incident.created"],
        title: "Incident created",
        severity: Severity::Critical,
        resolves: None,
    },
    EventKind {
        name: "mcp_tool.changed",
        raised_by: &["mcp_server.tool_changed"],
        title: "MCP tool definition changed since its approval: withheld from agents",
        severity: Severity::Error,
        resolves: None,
    },
];

/// The test message `POST /notifications/channels/{id}/test` sends; not subscribable.
pub const TEST_EVENT: &str = "notification.test";

/// The event an audit event type raises, if any.
pub fn raised_by(audit_event_type: &str) -> Option<&'static EventKind> {
    EVENTS
        .iter()
        .find(|kind| kind.raised_by.contains(&audit_event_type))
}

/// The event named `name`.
pub fn named(name: &str) -> Option<&'static EventKind> {
    EVENTS.iter().find(|kind| kind.name == name)
}

/// Whether a channel subscribed to `subscribed` receives `kind`: it names it, or names
/// the event `kind` resolves.
pub fn delivers(subscribed: &[String], kind: &EventKind) -> bool {
    subscribed
        .iter()
        .any(|name| name == kind.name || Some(name.as_str()) == kind.resolves)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_audit_event_raises_at_most_one_event_and_resolutions_name_real_events() {
        let mut seen = std::collections::HashSet::new();
        for kind in EVENTS {
            for audit in kind.raised_by {
                assert!(seen.insert(*audit), "{audit} raises two events");
            }
            if let Some(resolved) = kind.resolves {
                assert!(
                    named(resolved).is_some(),
                    "{} resolves {resolved}",
                    kind.name
                );
            }
        }
    }

    #[test]
    fn a_channel_for_an_event_also_hears_its_resolution() {
        let subscribed = vec!["agent.blocked".to_owned()];
        assert!(delivers(&subscribed, named("agent.blocked").unwrap()));
        assert!(delivers(&subscribed, named("agent.unblocked").unwrap()));
        assert!(!delivers(&subscribed, named("agent.quarantined").unwrap()));
    }
}
