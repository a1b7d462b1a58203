//! Tenants, plans and the credentials that belong to them, shared by signup, platform
//! administration and bootstrap.

use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::keys;
use warden_shared::scopes::Scope;
use warden_shared::timestamp::Timestamp;

use crate::audit::{self, AuditEvent};
use crate::auth::format_scopes;
use crate::db::WriteTx;

/// A tenant's plan. `free` is where self-service signups start, below `starter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Plan {
    Free,
    Starter,
    Professional,
    Enterprise,
    EnterprisePlus,
}

impl Plan {
    pub const fn as_str(self) -> &'static str {
        match self {
            Plan::Free => "free",
            Plan::Starter => "starter",
            Plan::Professional => "professional",
            Plan::Enterprise => "enterprise",
            Plan::EnterprisePlus => "enterprise_plus",
        }
    }

    pub fn parse(text: &str) -> Option<Plan> {
        [
            Plan::Free,
            Plan::Starter,
            Plan::Professional,
            Plan::Enterprise,
            Plan::EnterprisePlus,
        ]
        .into_iter()
        .find(|plan| plan.as_str() == text)
    }

    /// Active agents a tenant on this plan may have unless an operator set a limit.
    /// Starter's 25 comes from the spec; the others are Warden's choice.
    pub const fn default_agent_limit(self) -> i64 {
        match self {
            Plan::Free => 3,
            Plan::Starter => 25,
            Plan::Professional => 100,
            Plan::Enterprise => 1_000,
            Plan::EnterprisePlus => 10_000,
        }
    }
}

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
    audit::record(
        tx,
        &id,
        actor,
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
    audit::record(
        tx,
        tenant_id,
        actor,
        now,
        AuditEvent {
            event_type: "api_key.created",
            target_type: "api_key",
            target_id: &id,
            details: json!({ "name": name, "scopes": scope_names, "key_prefix": key_prefix }),
        },
    )
    .await?;
    Ok(IssuedKey {
        id,
        raw_key,
        key_prefix,
    })
}

/// Every table that holds tenant rows, children before parents. Deleting a tenant walks
/// this list; a test compares it with the database catalog so a new table cannot be
/// forgotten.
pub const TENANT_TABLES: &[&str] = &[
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
    "usage_model_hourly",
    "usage_days_closed",
    "usage_spend_monthly",
    "usage_records",
    "heartbeats",
    "audit_events",
    "agents",
    "teams",
    "sessions",
    "api_keys",
    "users",
];

/// Tables that belong to the platform, not to a tenant: the proxies' change outbox
/// (`proxy_changes` holds only entity ids and kinds, pruned by age, and must outlive a
/// deleted tenant so proxies learn of the deletion), its version counter, and the ids of
/// the decision batches the proxies sent (a batch holds many tenants' decisions; only
/// its id and arrival time are kept).
pub const PLATFORM_TABLES: &[&str] = &[
    "proxy_state_version",
    "proxy_changes",
    "policy_decision_batches",
];

/// Removes every row of `tenant_id`, the tenant row last. Returns false when there was
/// no such tenant.
pub async fn delete_tenant_rows(tx: &mut WriteTx, tenant_id: &str) -> Result<bool, sqlx::Error> {
    for table in TENANT_TABLES {
        sqlx::query(delete_statement(table))
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

/// Static statements per table: no SQL text is ever built from a value.
fn delete_statement(table: &str) -> &'static str {
    match table {
        "budget_alerts" => "DELETE FROM budget_alerts WHERE tenant_id = $1",
        "budget_limits" => "DELETE FROM budget_limits WHERE tenant_id = $1",
        "policy_decisions" => "DELETE FROM policy_decisions WHERE tenant_id = $1",
        "policy_result_set_members" => "DELETE FROM policy_result_set_members WHERE tenant_id = $1",
        "policy_result_sets" => "DELETE FROM policy_result_sets WHERE tenant_id = $1",
        "approvals" => "DELETE FROM approvals WHERE tenant_id = $1",
        "policies" => "DELETE FROM policies WHERE tenant_id = $1",
        "proxy_keys" => "DELETE FROM proxy_keys WHERE tenant_id = $1",
        "managed_keys" => "DELETE FROM managed_keys WHERE tenant_id = $1",
        "usage_hourly" => "DELETE FROM usage_hourly WHERE tenant_id = $1",
        "usage_daily" => "DELETE FROM usage_daily WHERE tenant_id = $1",
        "usage_daily_open" => "DELETE FROM usage_daily_open WHERE tenant_id = $1",
        "usage_model_hourly" => "DELETE FROM usage_model_hourly WHERE tenant_id = $1",
        "usage_days_closed" => "DELETE FROM usage_days_closed WHERE tenant_id = $1",
        "usage_spend_monthly" => "DELETE FROM usage_spend_monthly WHERE tenant_id = $1",
        "usage_records" => "DELETE FROM usage_records WHERE tenant_id = $1",
        "heartbeats" => "DELETE FROM heartbeats WHERE tenant_id = $1",
        "audit_events" => "DELETE FROM audit_events WHERE tenant_id = $1",
        "agents" => "DELETE FROM agents WHERE tenant_id = $1",
        "teams" => "DELETE FROM teams WHERE tenant_id = $1",
        "sessions" => "DELETE FROM sessions WHERE tenant_id = $1",
        "api_keys" => "DELETE FROM api_keys WHERE tenant_id = $1",
        "users" => "DELETE FROM users WHERE tenant_id = $1",
        _ => "SELECT $1",
    }
}
