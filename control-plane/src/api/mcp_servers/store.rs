//! `mcp_servers` rows, always within one tenant.

use sqlx::any::AnyRow;
use sqlx::{Any, Executor, Row};
use warden_shared::timestamp::Timestamp;

use super::{ApprovedTool, McpServer, ToolDrift};
use crate::api::envelope::Page;

const COLUMNS: &str = "id, name, url, secret_ref, enabled, created_at, updated_at, approved_at";

fn server_of(row: &AnyRow) -> Result<McpServer, sqlx::Error> {
    Ok(McpServer {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        url: row.try_get("url")?,
        secret_ref: row.try_get("secret_ref")?,
        enabled: row.try_get::<i64, _>("enabled")? != 0,
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
        updated_at: Timestamp::from_millis(row.try_get("updated_at")?),
        approved_at: row
            .try_get::<Option<i64>, _>("approved_at")?
            .map(Timestamp::from_millis),
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
        "INSERT INTO mcp_servers (tenant_id, {COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
    ))
    .bind(tenant_id)
    .bind(&server.id)
    .bind(&server.name)
    .bind(&server.url)
    .bind(&server.secret_ref)
    .bind(i64::from(server.enabled))
    .bind(server.created_at.as_millis())
    .bind(server.updated_at.as_millis())
    .bind(server.approved_at.map(Timestamp::as_millis))
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
         updated_at = $5, approved_at = $6 WHERE tenant_id = $7 AND id = $8",
    )
    .bind(&server.name)
    .bind(&server.url)
    .bind(&server.secret_ref)
    .bind(i64::from(server.enabled))
    .bind(server.updated_at.as_millis())
    .bind(server.approved_at.map(Timestamp::as_millis))
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

/// Replaces the server's approved tools with `tools`.
pub async fn replace_pins(
    tx: &mut crate::db::WriteTx,
    tenant_id: &str,
    server_id: &str,
    tools: &[ApprovedTool],
) -> Result<(), sqlx::Error> {
    delete_pins(&mut **tx, tenant_id, server_id).await?;
    for tool in tools {
        sqlx::query(
            "INSERT INTO mcp_server_tools (tenant_id, server_id, name, fingerprint, definition, \
             approved_at) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(tenant_id)
        .bind(server_id)
        .bind(&tool.name)
        .bind(&tool.fingerprint)
        .bind(tool.definition.to_string())
        .bind(tool.approved_at.as_millis())
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

pub async fn delete_pins<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    server_id: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM mcp_server_tools WHERE tenant_id = $1 AND server_id = $2")
        .bind(tenant_id)
        .bind(server_id)
        .execute(db)
        .await
        .map(|_| ())
}

pub async fn pins<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    server_id: &str,
) -> Result<Vec<ApprovedTool>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT name, fingerprint, definition, approved_at FROM mcp_server_tools \
         WHERE tenant_id = $1 AND server_id = $2 ORDER BY name",
    )
    .bind(tenant_id)
    .bind(server_id)
    .fetch_all(db)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(ApprovedTool {
                name: row.try_get("name")?,
                fingerprint: row.try_get("fingerprint")?,
                definition: serde_json::from_str(&row.try_get::<String, _>("definition")?)
                    .unwrap_or_default(),
                approved_at: Timestamp::from_millis(row.try_get("approved_at")?),
            })
        })
        .collect()
}

/// Definitions the proxies reported as differing from the approved ones since
/// `since` (the approval), newest first.
pub async fn drifts<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    server_id: &str,
    since: i64,
) -> Result<Vec<ToolDrift>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT tool, fingerprint, pinned_fingerprint, first_seen_at FROM mcp_tool_drifts \
         WHERE tenant_id = $1 AND server_id = $2 AND first_seen_at >= $3 \
         ORDER BY first_seen_at DESC, tool LIMIT 1000",
    )
    .bind(tenant_id)
    .bind(server_id)
    .bind(since)
    .fetch_all(db)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(ToolDrift {
                tool: row.try_get("tool")?,
                fingerprint: row.try_get("fingerprint")?,
                approved_fingerprint: row.try_get("pinned_fingerprint")?,
                seen_at: Timestamp::from_millis(row.try_get("first_seen_at")?),
            })
        })
        .collect()
}
