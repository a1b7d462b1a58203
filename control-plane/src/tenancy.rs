//! Tenants and the credentials that belong to them, shared by signup, platform
//! administration and bootstrap.

use serde_json::json;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::keys;
use warden_shared::scopes::Scope;
use warden_shared::timestamp::Timestamp;

use crate::auth::format_scopes;
use crate::changes::{self, AuditEvent, Author, Proxies};
use crate::db::WriteTx;
use crate::plans::Plan;

/// What is needed to create a tenant.
#[derive(Debug)]
pub struct NewTenant<'a> {
    pub company_name: &'a str,
    pub owner_email: Option<&'a str>,
    pub plan: Plan,
    pub agent_limit: i64,
    /// The platform operators' own tenant, which holds the platform-admin key.
    pub is_platform: bool,
}

/// A freshly issued API key; `raw_key` exists only in this value and the response.
#[derive(Debug)]
pub struct IssuedKey {
    pub id: String,
    pub raw_key: String,
    pub key_prefix: String,
}

/// Inserts a tenant and records `tenant.created` in its own trail; returns its id.
pub async fn insert_tenant(
    tx: &mut WriteTx,
    actor: &str,
    now: Timestamp,
    tenant: &NewTenant<'_>,
) -> Result<String, sqlx::Error> {
    let id = new_id(IdKind::Tenant, now.as_millis());
    sqlx::query(
        "INSERT INTO tenants (id, company_name, owner_email, plan, agent_limit, active_agents, \
         is_platform, created_at) VALUES ($1, $2, $3, $4, $5, 0, $6, $7)",
    )
    .bind(&id)
    .bind(tenant.company_name)
    .bind(tenant.owner_email)
    .bind(tenant.plan.as_str())
    .bind(tenant.agent_limit)
    .bind(i64::from(tenant.is_platform))
    .bind(now.as_millis())
    .execute(&mut **tx)
    .await?;
    crate::ledger::open_for_new_tenant(tx, &id, now).await?;
    changes::record(
        tx,
        Author {
            tenant_id: &id,
            actor,
        },
        now,
        AuditEvent {
            event_type: "tenant.created",
            target_type: "tenant",
            target_id: &id,
            details: json!({
                "company_name": tenant.company_name,
                "plan": tenant.plan.as_str(),
                "agent_limit": tenant.agent_limit,
            }),
        },
        Proxies::Unaffected,
    )
    .await?;
    Ok(id)
}

/// Stores a new API key (only its hash) and records `api_key.created`.
///
/// `raw_key` is supplied only by bootstrap (an operator-chosen key); otherwise a new
/// random key is generated.
#[allow(clippy::too_many_arguments)]
pub async fn insert_api_key(
    tx: &mut WriteTx,
    tenant_id: &str,
    actor: &str,
    now: Timestamp,
    name: &str,
    scopes: &[Scope],
    expires_at: Option<Timestamp>,
    raw_key: Option<String>,
) -> Result<IssuedKey, sqlx::Error> {
    let raw_key = raw_key.unwrap_or_else(keys::generate_api_key);
    let id = new_id(IdKind::ApiKey, now.as_millis());
    let key_prefix = keys::display_prefix(&raw_key);
    sqlx::query(
        "INSERT INTO api_keys (id, tenant_id, name, key_prefix, key_hash, scopes, created_by, \
         expires_at, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(&id)
    .bind(tenant_id)
    .bind(name)
    .bind(&key_prefix)
    .bind(keys::hash_credential(&raw_key))
    .bind(format_scopes(scopes))
    .bind(actor)
    .bind(expires_at.map(Timestamp::as_millis))
    .bind(now.as_millis())
    .execute(&mut **tx)
    .await?;
    let scope_names: Vec<&str> = scopes.iter().map(|scope| scope.as_str()).collect();
    changes::record(
        tx,
        Author { tenant_id, actor },
        now,
        AuditEvent {
            event_type: "api_key.created",
            target_type: "api_key",
            target_id: &id,
            details: json!({ "name": name, "scopes": scope_names, "key_prefix": key_prefix }),
        },
        Proxies::Unaffected,
    )
    .await?;
    Ok(IssuedKey {
        id,
        raw_key,
        key_prefix,
    })
}

/// Every table that holds tenant rows, children before parents, each with the statement
/// that deletes a tenant's rows from it (written by the macro from the one list of
/// names, so no SQL text is ever built from a value and no table can be listed without
/// its delete).
/// Deleting a tenant walks this list; a test compares it with the database catalog so a
/// new table cannot be forgotten.
macro_rules! tenant_tables {
    ($($table:literal),* $(,)?) => {
        /// Every table with a `tenant_id`, children before parents.
        pub const TENANT_TABLES: &[&str] = &[$($table),*];
        /// The statement that deletes a tenant's rows, for each of `TENANT_TABLES`.
        const TENANT_TABLE_DELETES: &[&str] =
            &[$(concat!("DELETE FROM ", $table, " WHERE tenant_id = $1")),*];
    };
}

tenant_tables![
    "tool_calls",
    "mcp_tool_drifts",
    "mcp_server_tools",
    "mcp_servers",
    "sso_assertions",
    "sso_requests",
    "sso_configs",
    "payload_captures",
    "payload_capture_configs",
    "billing_checkouts",
    "billing_events",
    "anomalies",
    "anomaly_rules",
    "incident_updates",
    "incidents",
    "frias",
    "notification_attempts",
    "notification_deliveries",
    "notification_channels",
    "budget_alerts",
    "budget_limits",
    "policy_decisions",
    "policy_result_set_members",
    "policy_result_sets",
    "approvals",
    "policies",
    "proxy_keys",
    "managed_keys",
    "usage_hourly",
    "usage_daily",
    "usage_daily_open",
    "usage_monthly",
    "rate_grants",
    "budget_grants",
    "usage_model_hourly",
    "usage_days_closed",
    "usage_spend_monthly",
    "usage_records",
    "heartbeats",
    "risk_classifications",
    "agent_owners",
    "audit_events",
    "audit_heads",
    "policy_violation_minutes",
    "agents",
    "teams",
    "sessions",
    "key_sessions",
    "api_keys",
    "users",
];

/// Tables that belong to the platform, not to a tenant: the proxies' change outbox
/// (`proxy_changes` holds only entity ids and kinds, pruned by age, and must outlive a
/// deleted tenant so proxies learn of the deletion), its version counter, and the ids of
/// the decision batches the proxies sent (a batch holds many tenants' decisions; only
/// its id and arrival time are kept), and the proxies connected now with the state
/// version each has applied, and the leases of one-replica background jobs.
pub const PLATFORM_TABLES: &[&str] = &[
    "proxy_state_version",
    "proxy_changes",
    "policy_decision_batches",
    "proxy_streams",
    "worker_leases",
];

/// Removes every row of `tenant_id`, the tenant row last. Returns false when there was
/// no such tenant.
pub async fn delete_tenant_rows(tx: &mut WriteTx, tenant_id: &str) -> Result<bool, sqlx::Error> {
    // First the tenant's own row: an ingest batch holding it (`FOR KEY SHARE`, see
    // `api::internal::store::live_tenants`) commits before the rows below are deleted,
    // and one arriving later finds the tenant gone instead of failing on its key.
    if crate::db::bulk::is_postgres(tx) {
        sqlx::query("SELECT id FROM tenants WHERE id = $1 FOR UPDATE")
            .bind(tenant_id)
            .fetch_optional(&mut **tx)
            .await?;
    }
    for delete in TENANT_TABLE_DELETES {
        sqlx::query(delete)
            .bind(tenant_id)
            .execute(&mut **tx)
            .await?;
    }
    let result = sqlx::query("DELETE FROM tenants WHERE id = $1")
        .bind(tenant_id)
        .execute(&mut **tx)
        .await?;
    Ok(result.rows_affected() == 1)
}
