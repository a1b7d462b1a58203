//! `guardrail` policies on the request path: the request's content (its JSON body, or a
//! tool call's arguments) is parsed once and scanned by each guardrail that covers the
//! request (`warden_shared::guardrail`), every string in it. `block` refuses (403
//! `guardrail_violation`, naming the detector and the field, never the text), `redact`
//! replaces each finding before the request is sent (and says so in the
//! `x-warden-guardrail` response header), `flag` sends it as it is; every finding is in
//! the decision the control plane records.
//!
//! Guardrails fail closed: a scan that outlasts `proxy.guardrail_timeout_ms` refuses the
//! request (503 `guardrail_unavailable`), counted in
//! `warden_proxy_guardrail_failures_total`; the decision, a failure of the guardrail
//! policy, is audited like every violation.

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use prometheus::{IntCounter, IntCounterVec};
use serde_json::Value;
use warden_shared::guardrail::scan_json;
use warden_shared::policy::{found_summary, Guardrail, GuardrailAction, GuardrailVerdict};

use crate::action::Action;

/// The response header that tells an agent what was redacted from its request.
pub const GUARDRAIL_HEADER: &str = "x-warden-guardrail";

/// What every request's guardrails share: their time limit and metrics.
#[derive(Clone)]
pub struct Guardrails {
    pub timeout: Duration,
    /// Findings by action (`block`, `redact`, `flag`).
    pub findings: IntCounterVec,
    /// Scans that failed (timed out): each refused its request.
    pub failures: IntCounter,
}

/// One request's content as its guardrails scan it.
pub struct Content<'a> {
    action: Action<'a>,
    guardrails: &'a Guardrails,
    /// Set at the first scan: a request no guardrail covers never reads the clock.
    deadline: Cell<Option<Instant>>,
    /// Parsed at the first guardrail that covers the request.
    value: RefCell<Option<Value>>,
    redactions: RefCell<Vec<String>>,
    /// The guardrail policy whose scan failed, if one did.
    failed: Cell<Option<i64>>,
}

impl<'a> Content<'a> {
    pub fn new(action: Action<'a>, guardrails: &'a Guardrails) -> Content<'a> {
        Content {
            action,
            guardrails,
            deadline: Cell::new(None),
            value: RefCell::new(None),
            redactions: RefCell::new(Vec::new()),
            failed: Cell::new(None),
        }
    }

    /// `guardrail`'s verdict (policy `policy_id`), redacting in place for `redact`.
    pub fn scan(&self, policy_id: i64, guardrail: &Guardrail) -> GuardrailVerdict {
        let mut value = self.value.borrow_mut();
        if value.is_none() {
            *value = self.action.content();
        }
        let Some(value) = value.as_mut() else {
            return self.failure(policy_id, "the content is not JSON");
        };
        let redact = guardrail.action == GuardrailAction::Redact;
        let deadline = self
            .deadline
            .get()
            .unwrap_or_else(|| Instant::now() + self.guardrails.timeout);
        self.deadline.set(Some(deadline));
        match scan_json(value, &guardrail.scanner, redact, deadline) {
            Ok(hits) if hits.is_empty() => GuardrailVerdict::Clean,
            Ok(hits) => {
                let action = match guardrail.action {
                    GuardrailAction::Block => "block",
                    GuardrailAction::Redact => "redact",
                    GuardrailAction::Flag => "flag",
                };
                self.guardrails
                    .findings
                    .with_label_values(&[action])
                    .inc_by(hits.len() as u64);
                if redact {
                    self.redactions.borrow_mut().push(found_summary(&hits));
                }
                GuardrailVerdict::Found(hits)
            }
            Err(_) => self.failure(
                policy_id,
                &format!(
                    "its scan took longer than {} ms",
                    self.guardrails.timeout.as_millis()
                ),
            ),
        }
    }

    fn failure(&self, policy_id: i64, why: &str) -> GuardrailVerdict {
        self.guardrails.failures.inc();
        self.failed.set(Some(policy_id));
        GuardrailVerdict::Failed(why.to_owned())
    }

    /// The guardrail policy whose scan failed, if one did.
    pub fn failed(&self) -> Option<i64> {
        self.failed.get()
    }

    /// The content as redacted, with the header that says what was, when a `redact`
    /// guardrail changed it.
    pub fn into_redacted(self) -> Option<(Value, String)> {
        let redactions = self.redactions.into_inner();
        if redactions.is_empty() {
            return None;
        }
        let value = self.value.into_inner()?;
        // Field paths are the body's own member names: kept to printable ASCII.
        let header: String = format!("redacted {}", redactions.join(", "))
            .chars()
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        Some((value, header))
    }
}
