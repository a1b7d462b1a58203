//! SSO rows: the tenant's configuration, the AuthnRequests awaiting an answer and the
//! assertion ids already consumed.

use sqlx::{AnyPool, Row};
use warden_shared::timestamp::Timestamp;

use crate::db::WriteTx;

/// A tenant's stored configuration, certificate included (never rendered).
#[derive(Debug, Clone)]
pub struct StoredConfig {
    pub id: String,
    pub tenant_id: String,
    pub provider_name: String,
    pub idp_entity_id: String,
    pub idp_sso_url: String,
    pub idp_slo_url: Option<String>,
    pub idp_x509_cert: String,
    pub enabled: bool,
    pub auto_provision: bool,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

const COLUMNS: &str = "id, tenant_id, provider_name, idp_entity_id, idp_sso_url, idp_slo_url, \
     idp_x509_cert, enabled, auto_provision, created_at, updated_at";

fn config_of(row: &sqlx::any::AnyRow) -> Result<StoredConfig, sqlx::Error> {
    Ok(StoredConfig {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        provider_name: row.try_get("provider_name")?,
        idp_entity_id: row.try_get("idp_entity_id")?,
        idp_sso_url: row.try_get("idp_sso_url")?,
        idp_slo_url: row.try_get("idp_slo_url")?,
        idp_x509_cert: row.try_get("idp_x509_cert")?,
        enabled: row.try_get::<i64, _>("enabled")? != 0,
        auto_provision: row.try_get::<i64, _>("auto_provision")? != 0,
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
        updated_at: Timestamp::from_millis(row.try_get("updated_at")?),
    })
}

pub async fn get(pool: &AnyPool, tenant_id: &str) -> Result<Option<StoredConfig>, sqlx::Error> {
    sqlx::query(&format!(
        "SELECT {COLUMNS} FROM sso_configs WHERE tenant_id = $1"
    ))
    .bind(tenant_id)
    .fetch_optional(pool)
    .await?
    .as_ref()
    .map(config_of)
    .transpose()
}

/// The configuration inside a write, its row locked on PostgreSQL.
pub async fn get_for_update(
    tx: &mut WriteTx,
    tenant_id: &str,
) -> Result<Option<StoredConfig>, sqlx::Error> {
    let lock = if crate::db::bulk::is_postgres(tx) {
        " FOR UPDATE"
    } else {
        ""
    };
    sqlx::query(&format!(
        "SELECT {COLUMNS} FROM sso_configs WHERE tenant_id = $1{lock}"
    ))
    .bind(tenant_id)
    .fetch_optional(&mut **tx)
    .await?
    .as_ref()
    .map(config_of)
    .transpose()
}

pub async fn insert(tx: &mut WriteTx, config: &StoredConfig) -> Result<(), sqlx::Error> {
    sqlx::query(&format!(
        "INSERT INTO sso_configs ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
    ))
    .bind(&config.id)
    .bind(&config.tenant_id)
    .bind(&config.provider_name)
    .bind(&config.idp_entity_id)
    .bind(&config.idp_sso_url)
    .bind(&config.idp_slo_url)
    .bind(&config.idp_x509_cert)
    .bind(i64::from(config.enabled))
    .bind(i64::from(config.auto_provision))
    .bind(config.created_at.as_millis())
    .bind(config.updated_at.as_millis())
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

/// Replaces the IdP settings (not `enabled`, `id` or `created_at`).
pub async fn update(tx: &mut WriteTx, config: &StoredConfig) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE sso_configs SET provider_name = $1, idp_entity_id = $2, idp_sso_url = $3, \
         idp_slo_url = $4, idp_x509_cert = $5, auto_provision = $6, updated_at = $7 \
         WHERE tenant_id = $8",
    )
    .bind(&config.provider_name)
    .bind(&config.idp_entity_id)
    .bind(&config.idp_sso_url)
    .bind(&config.idp_slo_url)
    .bind(&config.idp_x509_cert)
    .bind(i64::from(config.auto_provision))
    .bind(config.updated_at.as_millis())
    .bind(&config.tenant_id)
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

pub async fn set_enabled(
    tx: &mut WriteTx,
    tenant_id: &str,
    enabled: bool,
    at: Timestamp,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE sso_configs SET enabled = $1, updated_at = $2 WHERE tenant_id = $3")
        .bind(i64::from(enabled))
        .bind(at.as_millis())
        .bind(tenant_id)
        .execute(&mut **tx)
        .await
        .map(|_| ())
}

/// How many AuthnRequests a tenant may have awaiting an answer: the newest are matched.
pub const MAX_PENDING_REQUESTS: i64 = 1_000;

pub async fn insert_request(
    tx: &mut WriteTx,
    tenant_id: &str,
    request_id: &str,
    expires_at: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO sso_requests (id, tenant_id, expires_at) VALUES ($1, $2, $3)")
        .bind(request_id)
        .bind(tenant_id)
        .bind(expires_at)
        .execute(&mut **tx)
        .await
        .map(|_| ())
}

/// The tenant's AuthnRequests still awaiting an answer, newest first.
pub async fn pending_requests(
    pool: &AnyPool,
    tenant_id: &str,
    now_ms: i64,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT id FROM sso_requests WHERE tenant_id = $1 AND expires_at > $2 \
         ORDER BY expires_at DESC LIMIT $3",
    )
    .bind(tenant_id)
    .bind(now_ms)
    .bind(MAX_PENDING_REQUESTS)
    .fetch_all(pool)
    .await
}

/// Consumes the request `request_id`: false when it was answered already (or expired and
/// swept).
pub async fn consume_request(
    tx: &mut WriteTx,
    tenant_id: &str,
    request_id: &str,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("DELETE FROM sso_requests WHERE tenant_id = $1 AND id = $2")
        .bind(tenant_id)
        .bind(request_id)
        .execute(&mut **tx)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Records the assertion as used: false when it was used before (a replay).
pub async fn consume_assertion(
    tx: &mut WriteTx,
    tenant_id: &str,
    assertion_id: &str,
    expires_at: i64,
) -> Result<bool, sqlx::Error> {
    let inserted = sqlx::query(
        "INSERT INTO sso_assertions (tenant_id, assertion_id, expires_at) VALUES ($1, $2, $3) \
         ON CONFLICT (tenant_id, assertion_id) DO NOTHING",
    )
    .bind(tenant_id)
    .bind(assertion_id)
    .bind(expires_at)
    .execute(&mut **tx)
    .await?;
    Ok(inserted.rows_affected() == 1)
}

/// Forgets requests and assertion ids past their expiry (an expired assertion is refused
/// on its validity window, so its id need not be kept).
pub async fn sweep(tx: &mut WriteTx, now_ms: i64) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM sso_requests WHERE expires_at <= $1")
        .bind(now_ms)
        .execute(&mut **tx)
        .await?;
    sqlx::query("DELETE FROM sso_assertions WHERE expires_at <= $1")
        .bind(now_ms)
        .execute(&mut **tx)
        .await?;
    Ok(())
}
