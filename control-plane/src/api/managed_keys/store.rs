//! SQL of managed keys. Every statement filters by tenant; the secret reference is
//! written and never read back here (the proxy-state loader reads it for the proxies).

use sqlx::{AnyPool, Row};
use warden_shared::timestamp::Timestamp;

use super::ManagedKey;
use crate::api::envelope::Page;
use crate::db::WriteTx;

pub async fn insert(
    tx: &mut WriteTx,
    tenant_id: &str,
    key: &ManagedKey,
    secret_ref: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO managed_keys (id, tenant_id, provider, label, secret_ref, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&key.id)
    .bind(tenant_id)
    .bind(&key.provider)
    .bind(&key.label)
    .bind(secret_ref)
    .bind(key.created_at.as_millis())
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

/// One page, newest first.
pub async fn list(
    pool: &AnyPool,
    tenant_id: &str,
    page: Page,
) -> Result<Vec<ManagedKey>, sqlx::Error> {
    sqlx::query(
        "SELECT id, provider, label, created_at FROM managed_keys WHERE tenant_id = $1 \
         ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3",
    )
    .bind(tenant_id)
    .bind(page.limit)
    .bind(page.offset())
    .fetch_all(pool)
    .await?
    .iter()
    .map(|row| {
        Ok(ManagedKey {
            id: row.try_get("id")?,
            provider: row.try_get("provider")?,
            label: row.try_get("label")?,
            created_at: Timestamp::from_millis(row.try_get("created_at")?),
        })
    })
    .collect()
}

pub async fn count(pool: &AnyPool, tenant_id: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT COUNT(*) FROM managed_keys WHERE tenant_id = $1")
        .bind(tenant_id)
        .fetch_one(pool)
        .await
}

/// Deletes the key; returns its provider, or `None` when the tenant has no such key.
pub async fn delete(
    tx: &mut WriteTx,
    tenant_id: &str,
    id: &str,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar(
        "DELETE FROM managed_keys WHERE tenant_id = $1 AND id = $2 RETURNING provider",
    )
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(&mut **tx)
    .await
}
