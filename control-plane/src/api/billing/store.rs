//! SQL of billing: the tenant's billing columns, checkouts, applied provider events.

use sqlx::{Any, AnyConnection, AnyPool, Executor, Row};

use crate::api::agents::agent_is_live;
use warden_shared::timestamp::Timestamp;

use crate::db::WriteTx;

/// A tenant's billing state.
#[derive(Debug, Clone)]
pub struct Account {
    pub plan: String,
    pub agent_limit: i64,
    pub active_agents: i64,
    pub pending_plan: Option<String>,
    pub pending_plan_at: Option<i64>,
    pub payment_status: String,
    pub payment_method: Option<String>,
    pub free_agent_id: Option<String>,
}

pub async fn account<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
) -> Result<Option<Account>, sqlx::Error> {
    let Some(row) = sqlx::query(
        "SELECT plan, agent_limit, active_agents, pending_plan, pending_plan_at, payment_status, \
         payment_method, free_agent_id FROM tenants WHERE id = $1",
    )
    .bind(tenant_id)
    .fetch_optional(db)
    .await?
    else {
        return Ok(None);
    };
    Ok(Some(Account {
        plan: row.try_get("plan")?,
        agent_limit: row.try_get("agent_limit")?,
        active_agents: row.try_get("active_agents")?,
        pending_plan: row.try_get("pending_plan")?,
        pending_plan_at: row.try_get("pending_plan_at")?,
        payment_status: row.try_get("payment_status")?,
        payment_method: row.try_get("payment_method")?,
        free_agent_id: row.try_get("free_agent_id")?,
    }))
}

/// The free slot's agent: `set` while it is live, else the tenant's oldest live agent
/// (none without agents: the next one registered takes the slot).
pub async fn recorded_agent(
    conn: &mut AnyConnection,
    tenant_id: &str,
    set: Option<&str>,
) -> Result<Option<String>, sqlx::Error> {
    if let Some(agent) = set {
        if agent_is_live(&mut *conn, tenant_id, agent).await? {
            return Ok(Some(agent.to_owned()));
        }
    }
    sqlx::query_scalar(
        "SELECT id FROM agents WHERE tenant_id = $1 AND deleted_at IS NULL ORDER BY created_at, id LIMIT 1",
    )
    .bind(tenant_id)
    .fetch_optional(conn)
    .await
}

pub async fn set_free_agent(
    tx: &mut WriteTx,
    tenant_id: &str,
    agent_id: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE tenants SET free_agent_id = $1 WHERE id = $2")
        .bind(agent_id)
        .bind(tenant_id)
        .execute(&mut **tx)
        .await
        .map(|_| ())
}

/// Moves the tenant to `plan` with its agent limit, clearing any pending change.
pub async fn set_plan(
    tx: &mut WriteTx,
    tenant_id: &str,
    plan: &str,
    agent_limit: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE tenants SET plan = $1, agent_limit = $2, pending_plan = NULL, pending_plan_at = NULL \
         WHERE id = $3",
    )
    .bind(plan)
    .bind(agent_limit)
    .bind(tenant_id)
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

pub async fn set_pending(
    tx: &mut WriteTx,
    tenant_id: &str,
    plan: &str,
    at: Timestamp,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE tenants SET pending_plan = $1, pending_plan_at = $2 WHERE id = $3")
        .bind(plan)
        .bind(at.as_millis())
        .bind(tenant_id)
        .execute(&mut **tx)
        .await
        .map(|_| ())
}

pub async fn set_payment(
    tx: &mut WriteTx,
    tenant_id: &str,
    status: &str,
    method: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE tenants SET payment_status = $1, payment_method = COALESCE($2, payment_method) WHERE id = $3",
    )
    .bind(status)
    .bind(method)
    .bind(tenant_id)
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

/// Tenants whose pending change is due at `now`: (tenant, plan).
pub async fn due_changes(pool: &AnyPool, now: i64) -> Result<Vec<(String, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, pending_plan FROM tenants WHERE pending_plan IS NOT NULL AND pending_plan_at <= $1",
    )
    .bind(now)
    .fetch_all(pool)
    .await
}

/// The tenant's pending change if it is still due at `now`, its row locked until `tx`
/// ends (on PostgreSQL; SQLite runs one writer at a time): a replica that applied it
/// meanwhile cleared it, so each due change is applied once whatever the replicas.
pub async fn take_due_change(
    tx: &mut WriteTx,
    tenant_id: &str,
    now: i64,
) -> Result<Option<String>, sqlx::Error> {
    let lock = if crate::db::bulk::is_postgres(tx) {
        " FOR UPDATE"
    } else {
        ""
    };
    sqlx::query_scalar(&format!(
        "SELECT pending_plan FROM tenants WHERE id = $1 AND pending_plan IS NOT NULL \
         AND pending_plan_at <= $2{lock}"
    ))
    .bind(tenant_id)
    .bind(now)
    .fetch_optional(&mut **tx)
    .await
}

pub struct Checkout<'a> {
    pub id: &'a str,
    pub from_plan: &'a str,
    pub to_plan: &'a str,
    pub amount_micros: i64,
    pub created_at: i64,
    pub expires_at: i64,
}

pub async fn insert_checkout(
    tx: &mut WriteTx,
    tenant_id: &str,
    checkout: &Checkout<'_>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO billing_checkouts (id, tenant_id, from_plan, to_plan, amount_micros, status, \
         created_at, expires_at) VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7)",
    )
    .bind(checkout.id)
    .bind(tenant_id)
    .bind(checkout.from_plan)
    .bind(checkout.to_plan)
    .bind(checkout.amount_micros)
    .bind(checkout.created_at)
    .bind(checkout.expires_at)
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

pub async fn complete_checkouts(
    tx: &mut WriteTx,
    tenant_id: &str,
    plan: &str,
    at: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE billing_checkouts SET status = 'completed', completed_at = $1 \
         WHERE tenant_id = $2 AND to_plan = $3 AND status = 'pending'",
    )
    .bind(at)
    .bind(tenant_id)
    .bind(plan)
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

/// Records a provider event as applied; false when it was applied before.
pub async fn claim_event(
    tx: &mut WriteTx,
    id: &str,
    tenant_id: &str,
    event: &str,
    at: i64,
) -> Result<bool, sqlx::Error> {
    let inserted = sqlx::query(
        "INSERT INTO billing_events (id, tenant_id, event, received_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(id)
    .bind(tenant_id)
    .bind(event)
    .bind(at)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    Ok(inserted > 0)
}
