//! The built-in policy templates (`/policy-templates`): common governance rules an
//! operator starts from. A policy made from one is created disabled, so it can be
//! reviewed (and its config adjusted) before it takes effect.

use serde::Serialize;
use serde_json::{json, Value};
use utoipa::ToSchema;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PolicyTemplate {
    pub id: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    pub policy_type: &'static str,
    #[schema(value_type = Object)]
    pub config: Value,
    pub scope: &'static str,
    pub priority: i64,
}

/// The catalog, in the order it is listed.
pub fn catalog() -> Vec<PolicyTemplate> {
    vec![
        PolicyTemplate {
            id: "production-approval",
            name: "Production requests need approval",
            description: "Every request from an agent in the production environment waits \
                          for a human approval; an approval lets that agent use the provider \
                          and model for an hour.",
            policy_type: "require_approval",
            config: json!({ "models": [], "providers": [], "environments": ["production"] }),
            scope: "environment:production",
            priority: 100,
        },
        PolicyTemplate {
            id: "approved-models",
            name: "Approved models only",
            description: "Refuses models outside a reviewed list (a trailing * matches a \
                          family of models).",
            policy_type: "model_allowlist",
            config: json!({ "allowed_models": ["gpt-4o", "gpt-4o-mini", "claude-sonnet-4*", "gemini-2.5-flash"] }),
            scope: "global",
            priority: 200,
        },
        PolicyTemplate {
            id: "block-provider",
            name: "Block a provider",
            description: "Keeps every agent off the listed providers, e.g. while a \
                          provider's data processing terms are under review.",
            policy_type: "block_provider",
            config: json!({ "providers": ["nvidia"] }),
            scope: "global",
            priority: 300,
        },
        PolicyTemplate {
            id: "monthly-cost-guard",
            name: "Monthly cost guard",
            description: "Warns at 80% and refuses requests at 100% of a monthly spend for \
                          the whole tenant.",
            policy_type: "budget_limit",
            config: json!({ "monthly_limit_usd": 1000.0, "warn_threshold_pct": 80, "block_threshold_pct": 100 }),
            scope: "global",
            priority: 250,
        },
        PolicyTemplate {
            id: "per-agent-rate-limit",
            name: "Per-agent rate limit",
            description: "At most 60 requests and 200,000 tokens per minute for each agent \
                          (429 with Retry-After above).",
            policy_type: "rate_limit",
            config: json!({ "requests_per_minute": 60, "tokens_per_minute": 200_000, "per": "agent" }),
            scope: "global",
            priority: 150,
        },
        PolicyTemplate {
            id: "review-frontier-models",
            name: "Review use of frontier models",
            description: "Forwards requests to the most capable (and costly) models but flags \
                          them for human review in the evaluation records.",
            policy_type: "require_human_review",
            config: json!({ "models": ["o1*", "o3*", "gpt-5*", "claude-opus*"], "providers": [], "environments": [] }),
            scope: "global",
            priority: 50,
        },
        PolicyTemplate {
            id: "secrets-and-personal-data",
            name: "Keep secrets and personal data out of prompts",
            description: "Scans every prompt, embedding input and tool call's arguments for \
                          API keys, cloud credentials, private keys, card numbers, IBANs, \
                          e-mail addresses and phone numbers, and refuses the request naming \
                          what was found where (set action to redact to send it with each \
                          finding replaced, or flag to send it and record the finding).",
            policy_type: "guardrail",
            config: json!({ "action": "block" }),
            scope: "global",
            priority: 400,
        },
    ]
}

pub fn find(id: &str) -> Option<PolicyTemplate> {
    catalog().into_iter().find(|template| template.id == id)
}
