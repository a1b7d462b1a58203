//! The snapshot stream between the planes: what the proxy enforces, as the control plane
//! sends it (a full snapshot on connect, then versioned deltas).
//!
//! Versions come from the control plane's change outbox and grow in commit order. A delta
//! carries the *current* state of each changed entity (or its removal), never a diff, so
//! applying a delta twice, or applying one whose entities are already newer in the
//! snapshot, converges to the same state. The stream is newline-delimited JSON, one
//! [`StreamMessage`] per line.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::policy::PolicyType;
use crate::registry::Provider;

/// One line of the stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamMessage {
    /// Everything, replacing what the proxy held.
    Snapshot(Snapshot),
    /// Changes after the previous message's version.
    Delta(Delta),
    /// Nothing changed; sent periodically so a proxy can tell a quiet stream from a dead
    /// connection, and carrying the version the proxy is at.
    Heartbeat { version: i64 },
    /// Month-to-date spend of budgeted scopes that changed lately (absolute figures, so
    /// receiving one twice is harmless). Not versioned: spend is not enforcement state
    /// the outbox orders, and the next update supersedes it.
    Spend { scopes: Vec<ScopeSpend> },
}

/// What the ledger has recorded this month for one budget scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeSpend {
    pub tenant_id: String,
    /// `tenant`, `team:<id>`, `agent:<id>` or `key:<api_key_id>` (see `crate::budget`).
    pub scope: String,
    /// The month the figure belongs to (see `Timestamp::month_start`).
    pub month: i64,
    pub cost_micros: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub version: i64,
    pub tenants: Vec<TenantState>,
    pub agents: Vec<AgentState>,
    pub keys: Vec<ProxyKeyState>,
    pub managed_keys: Vec<ManagedKeyState>,
    /// This month's spend of every budgeted scope that has any.
    #[serde(default)]
    pub spend: Vec<ScopeSpend>,
    /// Every tenant's enabled policies.
    #[serde(default)]
    pub policies: Vec<PolicyState>,
    /// Approvals that currently let an agent's requests through.
    #[serde(default)]
    pub grants: Vec<ApprovalGrant>,
    /// Every tenant's enabled budget limits.
    #[serde(default)]
    pub budget_limits: Vec<BudgetLimitState>,
    /// The payload capture of every tenant that has it enabled.
    #[serde(default)]
    pub payload_captures: Vec<PayloadCaptureState>,
    /// Every tenant's enabled MCP servers.
    #[serde(default)]
    pub mcp_servers: Vec<McpServerState>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    pub version: i64,
    pub upserts: Vec<Entity>,
    pub removals: Vec<EntityRef>,
    /// This month's spend of the budget scopes the upserted budget limits and
    /// `budget_limit` policies name, as the change was read: a proxy takes it with the
    /// change, so a new limit holds against the spend already made from the moment the
    /// proxy acknowledges it, not a spend message later.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spend: Vec<ScopeSpend>,
}

/// The current state of one entity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entity {
    Tenant(TenantState),
    Agent(AgentState),
    Key(ProxyKeyState),
    ManagedKey(ManagedKeyState),
    Policy(PolicyState),
    Grant(ApprovalGrant),
    BudgetLimit(BudgetLimitState),
    PayloadCapture(PayloadCaptureState),
    McpServer(McpServerState),
}

/// An entity that no longer exists. Removing a tenant removes everything of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "id", rename_all = "snake_case")]
pub enum EntityRef {
    Tenant(String),
    Agent(String),
    Key(String),
    ManagedKey(String),
    /// A policy deleted or disabled (by its id).
    Policy(String),
    /// An approval that no longer grants anything (by its id).
    Grant(String),
    /// A budget limit deleted or disabled (by its id).
    BudgetLimit(String),
    /// A tenant's payload capture turned off (by the tenant's id).
    PayloadCapture(String),
    /// An MCP server deleted or disabled (by its id).
    McpServer(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantState {
    pub id: String,
    /// `free`, `starter`, ...; the proxy refuses keys of tenants whose plan has no proxy.
    pub plan: String,
}

/// What the proxy needs of an agent: who it is and whether it may call at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentState {
    pub id: String,
    pub tenant_id: String,
    /// The agent's name in the registry (`gen_ai.agent.name` in traces).
    #[serde(default)]
    pub name: String,
    pub team_id: Option<String>,
    pub environment: String,
    pub blocked: bool,
    pub quarantined: bool,
    /// Lifecycle expiry (Unix ms): from then on the proxy refuses the agent.
    #[serde(default)]
    pub expires_at: Option<i64>,
}

/// A proxy key: looked up by the SHA-256 of the presented credential.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProxyKeyState {
    pub id: String,
    /// Hex SHA-256 of the raw key (`keys::hash_credential`).
    pub key_hash: String,
    pub tenant_id: String,
    pub agent_id: String,
    pub team_id: Option<String>,
    /// Empty: every provider.
    pub allowed_providers: Vec<Provider>,
    /// Empty: every model.
    pub allowed_models: Vec<String>,
    pub model_overrides: BTreeMap<String, String>,
    pub requests_per_minute: Option<i64>,
    pub tokens_per_minute: Option<i64>,
    /// Monthly budget of the key in micro-dollars.
    pub budget_limit_micros: Option<i64>,
    pub use_managed_key: bool,
    /// Unix milliseconds; the proxy refuses the key from then on.
    pub expires_at: Option<i64>,
}

/// A tenant's managed provider key: the Secrets Manager reference, never the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagedKeyState {
    pub id: String,
    pub tenant_id: String,
    pub provider: Provider,
    pub secret_ref: String,
}

/// An enabled policy. `config` is the policy's normalised JSON, which the proxy parses
/// with the same `PolicyConfig::from_json` the control plane validated it with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyState {
    pub id: i64,
    pub tenant_id: String,
    pub name: String,
    pub policy_type: PolicyType,
    /// `global`, `team:<id>`, `agent:<id>` or `environment:<name>`.
    pub scope: String,
    pub priority: i64,
    pub config: serde_json::Value,
}

/// A reviewer's approval: until `until` (Unix ms), the agent's requests under the policy
/// to the provider and model are forwarded (`releases` scope), or only the very action
/// that was held, by its digest (`action`: once, consumed through the control plane;
/// `action_repeatable`: each time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalGrant {
    pub id: i64,
    pub tenant_id: String,
    pub agent_id: String,
    pub policy_id: i64,
    pub provider: Provider,
    pub model: String,
    pub until: i64,
    #[serde(default)]
    pub releases: crate::policy::Releases,
    /// The held action's digest (`crate::action`), for approvals bound to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_digest: Option<String>,
}

/// An enabled budget limit (spec 2.11): its scope's spend is refused from the block
/// threshold on and answered with a warning from the warn threshold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetLimitState {
    pub id: String,
    pub tenant_id: String,
    /// `tenant`, `team:<id>` or `agent:<id>`.
    pub scope: String,
    pub monthly_limit_micros: i64,
    pub warn_threshold_pct: i64,
    pub block_threshold_pct: i64,
}

/// A tenant's enabled payload capture (spec 2.18): the proxy keeps a copy of each
/// forwarded request's body with these rules applied, and sends it with the request's
/// usage record. Rules were validated by the control plane; a proxy that cannot compile
/// one captures nothing for the tenant rather than capture unredacted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadCaptureState {
    pub tenant_id: String,
    /// The configuration's version, recorded with each capture.
    pub config_version: i64,
    pub redaction_rules: Vec<RedactionRuleState>,
}

/// An enabled MCP server of a tenant: where its tools are reached and the reference
/// to the credential the gateway presents to it (never the agent's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerState {
    pub id: String,
    pub tenant_id: String,
    /// Prefixes the server's tools for agents.
    pub name: String,
    pub url: String,
    /// The credential's Secrets Manager name, under the tenant's managed prefix.
    #[serde(default)]
    pub secret_ref: Option<String>,
    /// The tool definitions an operator approved (`POST /mcp-servers/{id}/approve`).
    /// Only these, unchanged, reach agents; empty until the server is approved.
    #[serde(default)]
    pub pinned_tools: Vec<PinnedTool>,
}

/// An approved tool of an MCP server: its name on the server and the fingerprint of its
/// definition (`crate::mcp::fingerprint`) when it was approved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedTool {
    pub name: String,
    pub fingerprint: String,
}

/// One redaction rule: the value at `field_path` (dot-separated member names; arrays on
/// the way are entered element by element) is replaced whole, or, with a `pattern`, only
/// the matches of the pattern in its strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedactionRuleState {
    pub id: String,
    pub field_path: String,
    #[serde(default)]
    pub pattern: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_tagged_json_lines() {
        let message = StreamMessage::Delta(Delta {
            version: 7,
            upserts: vec![Entity::Tenant(TenantState {
                id: "ten_1".into(),
                plan: "starter".into(),
            })],
            removals: vec![EntityRef::Key("key_1".into())],
            spend: vec![ScopeSpend {
                tenant_id: "ten_1".into(),
                scope: "tenant".into(),
                month: 1,
                cost_micros: 5,
            }],
        });
        let line = serde_json::to_string(&message).unwrap_or_default();
        assert!(line.starts_with(r#"{"type":"delta","version":7"#), "{line}");
        assert!(line.contains(r#"{"kind":"key","id":"key_1"}"#), "{line}");
        assert!(!line.contains('\n'));
        let back: Result<StreamMessage, _> = serde_json::from_str(&line);
        assert_eq!(back.ok(), Some(message));
    }
}
