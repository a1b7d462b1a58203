//! The outbox of changes the proxies must learn: written in the transaction of the
//! change itself, read by the snapshot publisher.
//!
//! Every change takes the next version by incrementing the single row of
//! `proxy_state_version`. On PostgreSQL that row lock is held until commit, so
//! transactions that change enforcement state commit one after another and versions
//! appear in commit order: a reader that has seen version N can never later discover a
//! smaller one. (SQLite serialises all writers anyway.) Changes are rare administrative
//! acts, so this serialisation costs nothing that matters.

use sqlx::Row;
use warden_shared::timestamp::Timestamp;

use crate::db::WriteTx;

/// What changed; the publisher reads the named entity's current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// An agent's enforcement flags (block, quarantine) or its existence.
    Agent,
    /// An API key: a proxy key created, or any key deleted (revoked).
    ApiKey,
    /// A tenant's managed provider key for one provider.
    ManagedKey,
    /// A tenant deleted or its plan changed.
    Tenant,
    /// A policy created, changed (enabled or not) or deleted; the id is the policy's.
    Policy,
    /// An approval decided: an approved one grants its agent's requests for a while.
    Approval,
    /// A budget limit created, changed (enabled or not) or deleted.
    BudgetLimit,
    /// A tenant's payload capture configured (the id is the tenant's).
    PayloadCapture,
    /// An MCP server registered, changed (enabled or not) or deleted.
    McpServer,
}

impl ChangeKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Agent => "agent",
            ChangeKind::ApiKey => "api_key",
            ChangeKind::ManagedKey => "managed_key",
            ChangeKind::Tenant => "tenant",
            ChangeKind::Policy => "policy",
            ChangeKind::Approval => "approval",
            ChangeKind::BudgetLimit => "budget_limit",
            ChangeKind::PayloadCapture => "payload_capture",
            ChangeKind::McpServer => "mcp_server",
        }
    }

    pub fn parse(text: &str) -> Option<ChangeKind> {
        [
            ChangeKind::Agent,
            ChangeKind::ApiKey,
            ChangeKind::ManagedKey,
            ChangeKind::Tenant,
            ChangeKind::Policy,
            ChangeKind::Approval,
            ChangeKind::BudgetLimit,
            ChangeKind::PayloadCapture,
            ChangeKind::McpServer,
        ]
        .into_iter()
        .find(|kind| kind.as_str() == text)
    }
}

/// Records that `entity_id` of `kind` changed; returns the change's version.
pub(super) async fn record(
    tx: &mut WriteTx,
    kind: ChangeKind,
    entity_id: &str,
    at: Timestamp,
) -> Result<i64, sqlx::Error> {
    let version: i64 = sqlx::query(
        "UPDATE proxy_state_version SET version = version + 1 WHERE id = 1 RETURNING version",
    )
    .fetch_one(&mut **tx)
    .await?
    .try_get("version")?;
    sqlx::query(
        "INSERT INTO proxy_changes (version, kind, entity_id, changed_at) VALUES ($1, $2, $3, $4)",
    )
    .bind(version)
    .bind(kind.as_str())
    .bind(entity_id)
    .bind(at.as_millis())
    .execute(&mut **tx)
    .await?;
    Ok(version)
}
