//! Payload capture (spec 2.18, 4.12): for a tenant that enabled it, a copy of each
//! forwarded request's body, redacted by the tenant's rules, rides to the ledger on the
//! request's usage record (the same queue, spool and idempotent batches, so a capture is
//! never lost where its record is not).
//!
//! Nothing of it is on the request path: a request only keeps a reference to the body it
//! already read ([`CaptureBuffer::capture`]); the redaction runs when the flusher writes
//! the batch ([`Capture::write`]), before the batch reaches the spool or the network, so
//! an unredacted copy never leaves the proxy's memory. The bodies held that way are
//! bounded in bytes (`payload_capture_buffer_mb`); a body that does not fit, or is larger
//! than `payload_capture_max_bytes`, is recorded as omitted with its size, and counted.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use prometheus::{IntCounterVec, IntGauge};
use serde_json::Value;
use warden_shared::redaction::Redactor;
use warden_shared::snapshot::PayloadCaptureState;

/// A tenant's capture, its rules compiled (once per configuration version).
#[derive(Debug)]
pub struct TenantCapture {
    pub config_version: i64,
    redactor: Redactor,
}

impl TenantCapture {
    pub fn compile(state: &PayloadCaptureState) -> Result<TenantCapture, String> {
        Ok(TenantCapture {
            config_version: state.config_version,
            redactor: Redactor::compile(&state.redaction_rules)?,
        })
    }

    /// Applies the tenant's redaction rules to `value` (the MCP gateway's approval items
    /// show tool arguments through them).
    pub fn redact(&self, value: &mut serde_json::Value) {
        self.redactor.redact(value);
    }
}

/// The bytes of request bodies held for capture, across the process.
pub struct CaptureBuffer {
    held: AtomicUsize,
    limit_bytes: usize,
    max_body_bytes: usize,
    metrics: CaptureMetrics,
}

#[derive(Clone)]
pub struct CaptureMetrics {
    /// `warden_proxy_payload_captures_total{outcome}`: captured, too_large, buffer_full.
    pub captures: IntCounterVec,
    /// `warden_proxy_payload_capture_buffer_bytes`.
    pub buffer_bytes: IntGauge,
}

/// One request's capture, until its batch is written. A clone shares the body and its
/// room in the buffer (a sampled span shows the prompt its usage record captures).
#[derive(Debug, Clone)]
pub struct Capture {
    tenant: Arc<TenantCapture>,
    body_bytes: usize,
    body: Held,
}

#[derive(Debug, Clone)]
enum Held {
    Body { body: Bytes, _hold: Arc<Hold> },
    Omitted(&'static str),
}

/// Room taken in the buffer, given back when the capture is written or dropped.
#[derive(Debug)]
struct Hold {
    buffer: Arc<CaptureBuffer>,
    bytes: usize,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.buffer.held.fetch_sub(self.bytes, Ordering::Relaxed);
        self.buffer.metrics.buffer_bytes.sub(self.bytes as i64);
    }
}

impl std::fmt::Debug for CaptureBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureBuffer")
            .field("held", &self.held.load(Ordering::Relaxed))
            .field("limit_bytes", &self.limit_bytes)
            .finish()
    }
}

impl CaptureMetrics {
    /// Metrics registered nowhere, for unit tests.
    #[cfg(test)]
    pub fn unregistered() -> CaptureMetrics {
        CaptureMetrics {
            captures: IntCounterVec::new(prometheus::Opts::new("c", "c"), &["outcome"])
                .expect("a valid metric"),
            buffer_bytes: IntGauge::new("b", "b").expect("a valid metric"),
        }
    }
}

impl CaptureBuffer {
    pub fn new(limit_bytes: usize, max_body_bytes: usize, metrics: CaptureMetrics) -> Arc<Self> {
        Arc::new(CaptureBuffer {
            held: AtomicUsize::new(0),
            limit_bytes,
            max_body_bytes,
            metrics,
        })
    }

    /// The capture of `body` for `tenant`: the body itself (a reference, not a copy)
    /// when it is small enough and the buffer has room, else a note of its size.
    pub fn capture(self: &Arc<Self>, tenant: Arc<TenantCapture>, body: &Bytes) -> Capture {
        let capture = self.hold(tenant, body);
        let outcome = match &capture.body {
            Held::Body { .. } => "captured",
            Held::Omitted(reason) => reason,
        };
        self.metrics.captures.with_label_values(&[outcome]).inc();
        capture
    }

    /// `body` held for `tenant` under the same limits as a capture, but not counted as
    /// one: what a sampled span exports that no usage record captures (an MCP tool
    /// call's arguments, `crate::otel`), until its batch is sent.
    pub fn hold(self: &Arc<Self>, tenant: Arc<TenantCapture>, body: &Bytes) -> Capture {
        let bytes = body.len();
        let held = if bytes > self.max_body_bytes {
            Held::Omitted("too_large")
        } else if self.take(bytes) {
            let hold = Hold {
                buffer: self.clone(),
                bytes,
            };
            Held::Body {
                body: body.clone(),
                _hold: Arc::new(hold),
            }
        } else {
            Held::Omitted("buffer_full")
        };
        Capture {
            tenant,
            body_bytes: bytes,
            body: held,
        }
    }

    fn take(&self, bytes: usize) -> bool {
        let taken = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                let after = held.checked_add(bytes)?;
                (after <= self.limit_bytes).then_some(after)
            })
            .is_ok();
        if taken {
            self.metrics.buffer_bytes.add(bytes as i64);
        }
        taken
    }
}

impl Capture {
    /// About the bytes its batch will carry for it.
    pub fn wire_bytes(&self) -> usize {
        match &self.body {
            Held::Body { body, .. } => body.len() + 80,
            Held::Omitted(_) => 80,
        }
    }

    /// Writes the record's `capture` object: `{config_version, bytes, redactions, body}`,
    /// the body redacted here, or `{config_version, bytes, omitted}`.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"config_version\":");
        out.extend_from_slice(
            itoa::Buffer::new()
                .format(self.tenant.config_version)
                .as_bytes(),
        );
        out.extend_from_slice(b",\"bytes\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.body_bytes).as_bytes());
        match &self.body {
            Held::Body { body, .. } => match self.redacted(body) {
                Some((redactions, text)) => {
                    out.extend_from_slice(b",\"redactions\":");
                    out.extend_from_slice(itoa::Buffer::new().format(redactions).as_bytes());
                    out.extend_from_slice(b",\"body\":");
                    out.extend_from_slice(&text);
                }
                None => out.extend_from_slice(b",\"omitted\":\"unreadable\""),
            },
            Held::Omitted(reason) => {
                out.extend_from_slice(b",\"omitted\":\"");
                out.extend_from_slice(reason.as_bytes());
                out.push(b'"');
            }
        }
        out.push(b'}');
    }

    /// The body as JSON with the rules applied, and how many values they changed; `Err`
    /// names why there is none (`too_large`, `buffer_full`, `unreadable`).
    pub fn redacted_value(&self) -> Result<(usize, Value), &'static str> {
        let body = match &self.body {
            Held::Body { body, .. } => body,
            Held::Omitted(reason) => return Err(reason),
        };
        let mut value: Value = serde_json::from_slice(body).map_err(|_| "unreadable")?;
        let redactions = self.tenant.redactor.redact(&mut value);
        Ok((redactions, value))
    }

    /// The body with the rules applied, and how many values they changed. Without rules
    /// it is the body as the agent sent it (the proxy has read it as one JSON object).
    fn redacted(&self, body: &Bytes) -> Option<(usize, Bytes)> {
        if self.tenant.redactor.is_empty() {
            return Some((0, body.clone()));
        }
        let (redactions, value) = self.redacted_value().ok()?;
        let text = serde_json::to_vec(&value).ok()?;
        Some((redactions, Bytes::from(text)))
    }
}

#[cfg(test)]
pub mod tests {
    use serde_json::json;
    use warden_shared::snapshot::RedactionRuleState;

    use super::*;

    fn buffer(limit_bytes: usize, max_body_bytes: usize) -> Arc<CaptureBuffer> {
        CaptureBuffer::new(limit_bytes, max_body_bytes, CaptureMetrics::unregistered())
    }

    pub fn tenant(rules: Vec<RedactionRuleState>) -> Arc<TenantCapture> {
        Arc::new(
            TenantCapture::compile(&PayloadCaptureState {
                tenant_id: "t".into(),
                config_version: 3,
                redaction_rules: rules,
            })
            .expect("compiles"),
        )
    }

    fn written(capture: &Capture) -> Value {
        let mut out = Vec::new();
        capture.write(&mut out);
        serde_json::from_slice(&out).expect("valid JSON")
    }

    #[test]
    fn the_body_is_written_redacted() {
        let rules = vec![RedactionRuleState {
            id: "ssn".into(),
            field_path: "messages.content".into(),
            pattern: Some(r"\d{3}-\d{2}-\d{4}".into()),
        }];
        let body = Bytes::from_static(
            br#"{"model":"m","messages":[{"role":"user","content":"ssn 123-45-6789"}]}"#,
        );
        let capture = buffer(1 << 20, 1 << 20).capture(tenant(rules), &body);
        assert_eq!(
            written(&capture),
            json!({
                "config_version": 3, "bytes": body.len(), "redactions": 1,
                "body": {"model": "m", "messages": [{"role": "user", "content": "ssn [REDACTED:ssn]"}]},
            })
        );
    }

    #[test]
    fn bodies_beyond_the_limits_are_noted_not_held() {
        let buffer = buffer(100, 60);
        let small = Bytes::from(format!("{{\"a\":\"{}\"}}", "x".repeat(40)));
        let large = Bytes::from(format!("{{\"a\":\"{}\"}}", "x".repeat(70)));
        let first = buffer.capture(tenant(vec![]), &small);
        assert_eq!(
            written(&first)["body"]["a"].as_str().map(str::len),
            Some(40)
        );
        assert_eq!(
            written(&buffer.capture(tenant(vec![]), &large))["omitted"],
            json!("too_large")
        );
        let second = buffer.capture(tenant(vec![]), &small);
        assert_eq!(
            written(&buffer.capture(tenant(vec![]), &small))["omitted"],
            json!("buffer_full")
        );
        drop((first, second));
        assert_eq!(buffer.held.load(Ordering::Relaxed), 0);
        assert!(written(&buffer.capture(tenant(vec![]), &small))["body"].is_object());
    }
}
