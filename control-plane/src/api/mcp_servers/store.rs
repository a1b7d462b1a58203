//! `mcp_servers` rows, always within one tenant.

use sqlx::any::AnyRow;
use sqlx::{Any, Executor, Row};
use warden_shared::timestamp::Timestamp;

use super::McpServer;
use crate::api::envelope::Page;

const COLUMNS: &str = "id, name, url, secret_ref, enabled, created_at, updated_at";

fn server_of(row: &AnyRow) -> Result<McpServer, sqlx::Error> {
    Ok(McpServer {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        url: row.try_get("url")?,
        secret_ref: row.try_get("secret_ref")?,
        enabled: row.try_get::<i64, _>("enabled")? != 0,
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
        updated_at: Timestamp::from_millis(row.try_get("updated_at")?),
    })
}

pub async fn list<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    page: Page,
) -> Result<Vec<McpServer>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM mcp_servers WHERE tenant_id = $1 ORDER BY name LIMIT $2 OFFSET $3"
    ))
    .bind(tenant_id)
    .bind(page.limit)
    .bind(page.offset())
    .fetch_all(db)
    .await?;
    rows.iter().map(server_of).collect()
}

pub async fn count<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT COUNT(*) FROM mcp_servers WHERE tenant_id = $1")
        .bind(tenant_id)
        .fetch_one(db)
        .await
}

pub async fn get<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    id: &str,
) -> Result<Option<McpServer>, sqlx::Error> {
    sqlx::query(&format!(
        "SELECT {COLUMNS} FROM mcp_servers WHERE tenant_id = $1 AND id = $2"
    ))
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(db)
    .await?
    .as_ref()
    .map(server_of)
    .transpose()
}

pub async fn insert<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    server: &McpServer,
) -> Result<(), sqlx::Error> {
    sqlx::query(&format!(
        "INSERT INTO mcp_servers (tenant_id, {COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
    ))
    .bind(tenant_id)
    .bind(&server.id)
    .bind(&server.name)
    .bind(&server.url)
    .bind(&server.secret_ref)
    .bind(i64::from(server.enabled))
    .bind(server.created_at.as_millis())
    .bind(server.updated_at.as_millis())
    .execute(db)
    .await
    .map(|_| ())
}

pub async fn update<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    server: &McpServer,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE mcp_servers SET name = $1, url = $2, secret_ref = $3, enabled = $4, \
         updated_at = $5 WHERE tenant_id = $6 AND id = $7",
    )
    .bind(&server.name)
    .bind(&server.url)
    .bind(&server.secret_ref)
    .bind(i64::from(server.enabled))
    .bind(server.updated_at.as_millis())
    .bind(tenant_id)
    .bind(&server.id)
    .execute(db)
    .await
    .map(|_| ())
}

pub async fn delete<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    id: &str,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("DELETE FROM mcp_servers WHERE tenant_id = $1 AND id = $2")
        .bind(tenant_id)
        .bind(id)
        .execute(db)
        .await?;
    Ok(done.rows_affected() == 1)
}
