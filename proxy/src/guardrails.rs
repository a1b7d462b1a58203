//! `guardrail` policies on the request path: the request's content (its JSON body, or a
//! tool call's arguments) is parsed once and scanned by each guardrail that covers the
//! request (`warden_shared::guardrail`), every string in it. `block` refuses (403
//! `guardrail_violation`, naming the detector and the field, never the text), `redact`
//! replaces each finding before the request is sent (and says so in the
//! `x-warden-guardrail` response header), `flag` sends it as it is; every finding is in
//! the decision the control plane records.
//!
//! Guardrails fail closed: a scan that outlasts `proxy.guardrail_timeout_ms` (read between
//! strings and inside a long one) refuses the request (503 `guardrail_unavailable`),
//! counted in `warden_proxy_guardrail_failures_total`; a body a provider could read
//! otherwise than the scan (a member named twice, text that is not Unicode) is refused
//! as the request's fault (400 `invalid_request`, `Action::content`). Either decision, a
//! failure of the guardrail policy, is audited like every violation.

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

/// Why a request's guardrails could not scan it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanFailure {
    /// The scan outlasted the time limit: the guardrail is unavailable (503).
    TimedOut,
    /// The body cannot be read as a provider would read it (a member named twice, text
    /// that is not Unicode): the request's fault (400), with what is wrong.
    Unreadable(String),
}

/// One request's content as its guardrails scan it.
pub struct Content<'a> {
    action: Action<'a>,
    guardrails: &'a Guardrails,
    /// Set at the first scan: a request no guardrail covers never reads the clock.
    deadline: Cell<Option<Instant>>,
    /// Read at the first guardrail that covers the request.
    value: RefCell<Option<Result<Value, String>>>,
    redactions: RefCell<Vec<String>>,
    /// The guardrail policy whose scan failed, and why, if one did.
    failed: RefCell<Option<(i64, ScanFailure)>>,
}

impl<'a> Content<'a> {
    pub fn new(action: Action<'a>, guardrails: &'a Guardrails) -> Content<'a> {
        Content {
            action,
            guardrails,
            deadline: Cell::new(None),
            value: RefCell::new(None),
            redactions: RefCell::new(Vec::new()),
            failed: RefCell::new(None),
        }
    }

    /// `guardrail`'s verdict (policy `policy_id`), redacting in place for `redact`.
    pub fn scan(&self, policy_id: i64, guardrail: &Guardrail) -> GuardrailVerdict {
        let mut value = self.value.borrow_mut();
        let value = value.get_or_insert_with(|| self.action.content());
        let value = match value {
            Ok(value) => value,
            Err(why) => return self.failure(policy_id, ScanFailure::Unreadable(why.clone())),
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
            Err(_) => {
                self.guardrails.failures.inc();
                self.failure(policy_id, ScanFailure::TimedOut)
            }
        }
    }

    /// The verdict of a scan that failed, its reason said by the failure.
    fn failure(&self, policy_id: i64, failure: ScanFailure) -> GuardrailVerdict {
        let why = match &failure {
            ScanFailure::TimedOut => format!(
                "its scan took longer than {} ms",
                self.guardrails.timeout.as_millis()
            ),
            ScanFailure::Unreadable(why) => why.clone(),
        };
        self.failed.replace(Some((policy_id, failure)));
        GuardrailVerdict::Failed(why)
    }

    /// The guardrail policy whose scan failed, and why, if one did.
    pub fn failed(&self) -> Option<(i64, ScanFailure)> {
        self.failed.borrow().clone()
    }

    /// The content as redacted, with the header that says what was, when a `redact`
    /// guardrail changed it.
    pub fn into_redacted(self) -> Option<(Value, String)> {
        let redactions = self.redactions.into_inner();
        if redactions.is_empty() {
            return None;
        }
        let value = self.value.into_inner()?.ok()?;
        // Paths show only names that are safe to show (`warden_shared::guardrail::scan`);
        // a header carries printable ASCII.
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
