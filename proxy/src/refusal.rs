//! Answers the proxy gives itself, in the OpenAI error shape so SDKs surface them:
//! `{"error": {"message", "type", "code", "param"}}`.

use serde_json::json;
use warden_shared::pricing::micros_to_decimal;
use warden_shared::registry::Provider;

use crate::budget::{OverBudget, RuleSource};

/// Why the proxy answered instead of a provider. `code()` is stable and also the metric
/// label of the decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    MissingKey,
    InvalidKey,
    KeyExpired,
    PlanWithoutProxy,
    AgentNotFound,
    AgentBlocked,
    /// The agent's lifecycle `expires_at` has passed.
    AgentExpired,
    AgentQuarantined,
    ProviderNotAllowed(Provider),
    ModelNotAllowed(String),
    ManagedKeyMissing(Provider),
    ProviderNotConfigured(Provider),
    ManagedKeyUnavailable(Provider),
    /// A budget (the key's `budget_limit_usd` or a budget limit) reached its block
    /// threshold or has no room for the request's estimate.
    BudgetExceeded(OverBudget),
    /// A policy refused the request (allowlist, blocked provider).
    PolicyViolation {
        policy_id: i64,
        reason: String,
    },
    /// A `budget_limit` policy's block threshold is reached.
    PolicyBudgetExceeded {
        policy_id: i64,
        reason: String,
    },
    /// A rate window is full until the next minute: a `rate_limit` policy's
    /// (`policy_id`), or the key's own `rate_limit_override`'s (`None`).
    RateLimited {
        policy_id: Option<i64>,
        reason: String,
        retry_after_secs: u64,
    },
    /// A `require_approval` policy holds the request until a human approves it.
    ApprovalRequired {
        policy_id: i64,
    },
    /// An MCP tool call names no tool of the tenant's enabled servers (prefixed name).
    ToolNotFound(String),
    /// An MCP tool whose definition is not an approved one (never approved, or changed
    /// since: see `crate::mcp::drift`).
    ToolNotApproved(String),
    /// An MCP server the proxy must list before it can tell whether a tool is approved
    /// did not answer (or is at an address the proxy may not reach); the server's name.
    ToolServerUnreachable(String),
    /// A single-use approval (by id) the control plane could not confirm as this
    /// request's.
    ApprovalUnconfirmed(i64),
    /// A `guardrail` policy found secrets or personal data (`block`).
    GuardrailViolation {
        policy_id: i64,
        reason: String,
    },
    /// A `guardrail` policy could not scan the request: refused, failing closed.
    GuardrailUnavailable {
        policy_id: i64,
        reason: String,
    },
    NotFound,
    MethodNotAllowed,
    BodyTooLarge(usize),
    UnsupportedMediaType,
    BadRequest(String),
    NotReady,
    UpstreamUnreachable(Provider),
    UpstreamTimeout(Provider),
    UpstreamFailed(Provider),
}

impl Refusal {
    pub fn status(&self) -> u16 {
        match self {
            Refusal::MissingKey | Refusal::InvalidKey | Refusal::KeyExpired => 401,
            Refusal::PlanWithoutProxy
            | Refusal::BudgetExceeded { .. }
            | Refusal::PolicyBudgetExceeded { .. } => 402,
            Refusal::RateLimited { .. } => 429,
            Refusal::AgentNotFound
            | Refusal::AgentBlocked
            | Refusal::AgentQuarantined
            | Refusal::AgentExpired
            | Refusal::ProviderNotAllowed(_)
            | Refusal::ModelNotAllowed(_)
            | Refusal::ManagedKeyMissing(_)
            | Refusal::PolicyViolation { .. }
            | Refusal::ApprovalRequired { .. }
            | Refusal::GuardrailViolation { .. }
            | Refusal::ToolNotApproved(_) => 403,
            Refusal::NotFound | Refusal::ToolNotFound(_) => 404,
            Refusal::MethodNotAllowed => 405,
            Refusal::BodyTooLarge(_) => 413,
            Refusal::UnsupportedMediaType => 415,
            Refusal::BadRequest(_) => 400,
            Refusal::UpstreamUnreachable(_)
            | Refusal::ToolServerUnreachable(_)
            | Refusal::UpstreamFailed(_)
            | Refusal::ManagedKeyUnavailable(_) => 502,
            Refusal::ProviderNotConfigured(_)
            | Refusal::NotReady
            | Refusal::ApprovalUnconfirmed(_)
            | Refusal::GuardrailUnavailable { .. } => 503,
            Refusal::UpstreamTimeout(_) => 504,
        }
    }

    /// The policy that refused, when one did.
    pub fn policy_id(&self) -> Option<i64> {
        match self {
            Refusal::PolicyViolation { policy_id, .. }
            | Refusal::PolicyBudgetExceeded { policy_id, .. }
            | Refusal::GuardrailViolation { policy_id, .. }
            | Refusal::GuardrailUnavailable { policy_id, .. }
            | Refusal::ApprovalRequired { policy_id } => Some(*policy_id),
            Refusal::RateLimited { policy_id, .. } => *policy_id,
            _ => None,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Refusal::MissingKey => "missing_api_key",
            Refusal::InvalidKey => "invalid_api_key",
            Refusal::KeyExpired => "api_key_expired",
            Refusal::PlanWithoutProxy => "plan_upgrade_required",
            Refusal::AgentNotFound => "agent_not_found",
            Refusal::AgentBlocked => "agent_blocked",
            Refusal::AgentQuarantined => "agent_quarantined",
            Refusal::AgentExpired => "agent_expired",
            Refusal::ProviderNotAllowed(_) => "provider_not_allowed",
            Refusal::ModelNotAllowed(_) => "model_not_allowed",
            Refusal::ManagedKeyMissing(_) => "managed_key_missing",
            Refusal::ProviderNotConfigured(_) => "provider_not_configured",
            Refusal::ManagedKeyUnavailable(_) => "managed_key_unavailable",
            Refusal::BudgetExceeded { .. } | Refusal::PolicyBudgetExceeded { .. } => {
                "budget_exceeded"
            }
            Refusal::PolicyViolation { .. } => "policy_violation",
            Refusal::RateLimited { .. } => "rate_limit_exceeded",
            Refusal::ApprovalRequired { .. } => "approval_required",
            Refusal::ToolNotFound(_) => "tool_not_found",
            Refusal::ToolNotApproved(_) => "tool_not_approved",
            Refusal::ApprovalUnconfirmed(_) => "approval_unconfirmed",
            Refusal::GuardrailViolation { .. } => "guardrail_violation",
            Refusal::GuardrailUnavailable { .. } => "guardrail_unavailable",
            Refusal::NotFound => "not_found",
            Refusal::MethodNotAllowed => "method_not_allowed",
            Refusal::BodyTooLarge(_) => "payload_too_large",
            Refusal::UnsupportedMediaType => "unsupported_media_type",
            Refusal::BadRequest(_) => "invalid_request",
            Refusal::NotReady => "proxy_not_ready",
            Refusal::UpstreamUnreachable(_) | Refusal::ToolServerUnreachable(_) => {
                "upstream_unreachable"
            }
            Refusal::UpstreamTimeout(_) => "upstream_timeout",
            Refusal::UpstreamFailed(_) => "upstream_failed",
        }
    }

    fn error_type(&self) -> &'static str {
        if let Refusal::BudgetExceeded { .. } | Refusal::PolicyBudgetExceeded { .. } = self {
            // OpenAI's type for an exhausted quota, which SDKs and agents recognise.
            return "insufficient_quota";
        }
        match self.status() {
            429 => "rate_limit_error",
            401 => "authentication_error",
            403 | 402 => "permission_error",
            404 => "not_found_error",
            400 | 405 | 413 | 415 => "invalid_request_error",
            _ => "api_error",
        }
    }

    pub fn message(&self) -> String {
        match self {
            Refusal::MissingKey => "send your Warden proxy key as `Authorization: Bearer <key>` \
                (or, to the Messages API, as `x-api-key`)"
                .into(),
            Refusal::InvalidKey => "the proxy key is not valid (unknown or revoked)".into(),
            Refusal::KeyExpired => "the proxy key has expired".into(),
            Refusal::PlanWithoutProxy => "the tenant's plan does not include the proxy".into(),
            Refusal::AgentNotFound => "the agent behind this key no longer exists".into(),
            Refusal::AgentBlocked => "the agent is blocked by its operators (kill switch)".into(),
            Refusal::AgentExpired => {
                "the agent's lifecycle has expired (expires_at passed); its operators can extend it"
                    .into()
            }
            Refusal::AgentQuarantined => "the agent is quarantined by its operators".into(),
            Refusal::ProviderNotAllowed(p) => {
                format!("this key may not use the provider `{}`", p.as_str())
            }
            Refusal::ModelNotAllowed(m) => format!("this key may not use the model `{m}`"),
            Refusal::ManagedKeyMissing(p) => format!(
                "this key uses managed provider keys, and the tenant has none for `{}`",
                p.as_str()
            ),
            Refusal::ProviderNotConfigured(p) => {
                format!("the proxy has no credential for `{}`", p.as_str())
            }
            Refusal::ManagedKeyUnavailable(p) => {
                format!(
                    "the managed key for `{}` cannot be read, or its secret holds no usable key",
                    p.as_str()
                )
            }
            Refusal::BudgetExceeded(over) => {
                let whose = match &over.source {
                    RuleSource::Key => "this key's monthly budget".to_owned(),
                    RuleSource::Limit(id) => {
                        format!("the monthly budget limit {id} of `{}`", over.scope)
                    }
                    RuleSource::Policy(id) => format!("budget policy {id} of `{}`", over.scope),
                };
                format!(
                    "{whose} (${}) is used up: ${} spent or in flight this month, and \
                     requests stop at ${} (the request's estimated cost does not fit)",
                    micros_to_decimal(over.limit_micros),
                    micros_to_decimal(over.spent_micros),
                    micros_to_decimal(over.block_micros)
                )
            }
            Refusal::PolicyViolation { policy_id, reason }
            | Refusal::PolicyBudgetExceeded { policy_id, reason } => {
                format!("refused by policy {policy_id}: {reason}")
            }
            Refusal::RateLimited {
                policy_id,
                reason,
                retry_after_secs,
            } => {
                let limiter = match policy_id {
                    Some(id) => format!("policy {id}"),
                    None => "this key's rate_limit_override".to_owned(),
                };
                format!("rate limited by {limiter}: {reason}; retry in {retry_after_secs} s")
            }
            Refusal::ApprovalRequired { policy_id } => {
                format!("policy {policy_id} requires a human approval of this request")
            }
            Refusal::ToolNotFound(tool) => format!(
                "no tool `{tool}` among the MCP servers this key reaches (tools are named \
                 `<server>__<tool>` at /mcp)"
            ),
            Refusal::ToolNotApproved(tool) => format!(
                "the tool `{tool}` is not approved as its server defines it now (never \
                 approved, or changed since); an operator must approve the server again"
            ),
            Refusal::ToolServerUnreachable(server) => {
                format!("cannot reach the MCP server `{server}` to check its tools' definitions")
            }
            Refusal::GuardrailViolation { policy_id, reason } => {
                format!("refused by guardrail policy {policy_id}: found {reason}")
            }
            Refusal::GuardrailUnavailable { policy_id, reason } => {
                format!("guardrail policy {policy_id}: {reason}")
            }
            Refusal::ApprovalUnconfirmed(id) => format!(
                "approval {id} releases this action once, and the control plane could not \
                 confirm the use as this request's; retry shortly"
            ),
            Refusal::NotFound => "no such endpoint on the Warden proxy; it serves POST \
                /v1/chat/completions, POST /v1/responses, POST /v1/messages, POST \
                /v1/messages/count_tokens, POST /v1/embeddings, GET /v1/models and the MCP \
                gateway at /mcp"
                .into(),
            Refusal::MethodNotAllowed => "method not allowed on this endpoint".into(),
            Refusal::BodyTooLarge(max) => format!("the request body is larger than {max} bytes"),
            Refusal::UnsupportedMediaType => "send the body as application/json".into(),
            Refusal::BadRequest(why) => why.clone(),
            Refusal::NotReady => {
                "the proxy has not loaded its state from the control plane yet".into()
            }
            Refusal::UpstreamUnreachable(p) => format!("cannot reach `{}`", p.as_str()),
            Refusal::UpstreamTimeout(p) => format!("`{}` did not answer in time", p.as_str()),
            Refusal::UpstreamFailed(p) => format!("`{}` broke off the answer", p.as_str()),
        }
    }

    /// Seconds after which a retry may pass (429s).
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Refusal::RateLimited {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            _ => None,
        }
    }

    /// The JSON body of the answer: OpenAI's error shape, except the spec's exact body
    /// for a request waiting on approval.
    pub fn body(&self) -> Vec<u8> {
        if let Refusal::ApprovalRequired { policy_id } = self {
            return json!({ "error": "approval_required", "approval_policy_id": policy_id })
                .to_string()
                .into_bytes();
        }
        json!({
            "error": {
                "message": self.message(),
                "type": self.error_type(),
                "code": self.code(),
                "param": null,
            }
        })
        .to_string()
        .into_bytes()
    }
}

impl Refusal {
    /// The JSON body in Anthropic's error shape, for the Messages API: the SDKs raise
    /// their typed error from the status and read `error.type` and `error.message`;
    /// Warden's `code` (and a held request's policy) ride beside them.
    pub fn anthropic_body(&self) -> Vec<u8> {
        let error_type = match self.status() {
            400 | 405 | 415 => "invalid_request_error",
            401 => "authentication_error",
            402 => "billing_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 => "overloaded_error",
            _ => "api_error",
        };
        let mut error =
            json!({ "type": error_type, "message": self.message(), "code": self.code() });
        if let Refusal::ApprovalRequired { policy_id } = self {
            error["approval_policy_id"] = json!(policy_id);
        }
        json!({ "type": "error", "error": error })
            .to_string()
            .into_bytes()
    }
}

/// A refusal, and the provider and model of the request when the proxy knew them (it
/// was admitted), for the metrics.
#[derive(Debug)]
pub struct Refused {
    pub refusal: Refusal,
    pub labels: Option<RouteLabels>,
}

/// The `provider` and `model` labels of a request's metrics.
#[derive(Debug, Clone, Copy)]
pub struct RouteLabels {
    pub provider: Provider,
    /// `crate::metrics::model_label`: the price table's model family, or `other`.
    pub model: &'static str,
}

impl From<Refusal> for Refused {
    fn from(refusal: Refusal) -> Refused {
        Refused {
            refusal,
            labels: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_use_the_openai_error_shape() {
        let body: serde_json::Value =
            serde_json::from_slice(&Refusal::AgentBlocked.body()).unwrap_or_default();
        assert_eq!(body["error"]["code"], "agent_blocked");
        assert_eq!(body["error"]["type"], "permission_error");
        assert!(body["error"]["message"].is_string());
        assert_eq!(Refusal::AgentQuarantined.status(), 403);
        assert_ne!(
            Refusal::AgentQuarantined.code(),
            Refusal::AgentBlocked.code()
        );
    }

    #[test]
    fn approval_required_has_the_spec_body_and_rate_limits_say_when() {
        let body: serde_json::Value =
            serde_json::from_slice(&Refusal::ApprovalRequired { policy_id: 7 }.body())
                .unwrap_or_default();
        assert_eq!(
            body,
            json!({ "error": "approval_required", "approval_policy_id": 7 })
        );
        let limited = Refusal::RateLimited {
            policy_id: Some(1),
            reason: "requests per minute limit reached".into(),
            retry_after_secs: 12,
        };
        assert_eq!(
            (limited.status(), limited.retry_after_secs()),
            (429, Some(12))
        );
    }

    #[test]
    fn the_messages_api_gets_anthropics_error_shape() {
        let body: serde_json::Value =
            serde_json::from_slice(&Refusal::AgentBlocked.anthropic_body()).unwrap_or_default();
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "permission_error");
        assert_eq!(body["error"]["code"], "agent_blocked");
        let held: serde_json::Value =
            serde_json::from_slice(&Refusal::ApprovalRequired { policy_id: 3 }.anthropic_body())
                .unwrap_or_default();
        assert_eq!(
            (
                held["error"]["code"].clone(),
                held["error"]["approval_policy_id"].clone()
            ),
            (json!("approval_required"), json!(3))
        );
    }
}
