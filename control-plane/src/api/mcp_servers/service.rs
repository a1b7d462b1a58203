//! The rules of MCP servers: names that can prefix tool names, URLs through the outbound
//! guard (SSRF), credentials only as references under the tenant's managed prefix, audit.

use serde_json::json;
use warden_shared::ids::{is_valid_id, new_id, IdKind};

use super::{store, CreateMcpServerInput, McpServer, UpdateMcpServerInput};
use crate::api::envelope::Page;
use crate::api::managed_keys::tenant_secret_ref;
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, ChangeKind, Proxies};
use crate::db::{is_unique_violation, WriteTx};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::notifications::channel::check_public_url;
use crate::state::AppState;

pub async fn list(
    state: &AppState,
    caller: &Caller,
    page: Page,
) -> ApiResult<(Vec<McpServer>, i64)> {
    let servers = store::list(state.db.pool(), &caller.tenant_id, page).await?;
    let total = store::count(state.db.pool(), &caller.tenant_id).await?;
    Ok((servers, total))
}

pub async fn get(state: &AppState, caller: &Caller, id: &str) -> ApiResult<McpServer> {
    if !is_valid_id(IdKind::McpServer, id) {
        return Err(not_found());
    }
    store::get(state.db.pool(), &caller.tenant_id, id)
        .await?
        .ok_or_else(not_found)
}

pub async fn create(
    state: &AppState,
    caller: &Caller,
    input: CreateMcpServerInput,
) -> ApiResult<McpServer> {
    check_name(&input.name)?;
    check_url(state, &input.url).await?;
    let secret_ref = input
        .secret_ref
        .as_deref()
        .map(|given| tenant_secret_ref(&caller.tenant_id, given, "mcp/github"))
        .transpose()?;
    let now = state.clock.now();
    let server = McpServer {
        id: new_id(IdKind::McpServer, now.as_millis()),
        name: input.name,
        url: input.url,
        secret_ref,
        enabled: input.enabled.unwrap_or(true),
        created_at: now,
        updated_at: now,
    };
    let mut tx = state.db.begin_write().await?;
    store::insert(&mut *tx, &caller.tenant_id, &server)
        .await
        .map_err(name_conflict)?;
    audit(&mut tx, caller, &server, "mcp_server.created").await?;
    tx.commit().await?;
    Ok(server)
}

pub async fn update(
    state: &AppState,
    caller: &Caller,
    id: &str,
    input: UpdateMcpServerInput,
) -> ApiResult<McpServer> {
    let mut server = get(state, caller, id).await?;
    if let Some(name) = input.name {
        check_name(&name)?;
        server.name = name;
    }
    if let Some(url) = input.url {
        check_url(state, &url).await?;
        server.url = url;
    }
    match input.secret_ref {
        None => {}
        Some(None) => server.secret_ref = None,
        Some(Some(given)) => {
            server.secret_ref = Some(tenant_secret_ref(&caller.tenant_id, &given, "mcp/github")?)
        }
    }
    if let Some(enabled) = input.enabled {
        server.enabled = enabled;
    }
    server.updated_at = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    store::update(&mut *tx, &caller.tenant_id, &server)
        .await
        .map_err(name_conflict)?;
    audit(&mut tx, caller, &server, "mcp_server.updated").await?;
    tx.commit().await?;
    Ok(server)
}

pub async fn delete(state: &AppState, caller: &Caller, id: &str) -> ApiResult<()> {
    let server = get(state, caller, id).await?;
    let mut tx = state.db.begin_write().await?;
    if !store::delete(&mut *tx, &caller.tenant_id, id).await? {
        return Err(not_found());
    }
    audit(&mut tx, caller, &server, "mcp_server.deleted").await?;
    tx.commit().await?;
    Ok(())
}

async fn audit(
    tx: &mut WriteTx,
    caller: &Caller,
    server: &McpServer,
    event_type: &'static str,
) -> ApiResult<()> {
    changes::record(
        tx,
        caller.author(),
        server.updated_at,
        AuditEvent {
            event_type,
            target_type: "mcp_server",
            target_id: &server.id,
            details: json!({
                "name": server.name,
                "url": server.url,
                "secret_ref": server.secret_ref,
                "enabled": server.enabled,
            }),
        },
        Proxies::Reload(ChangeKind::McpServer),
    )
    .await?;
    Ok(())
}

/// A name that prefixes the server's tools: 1 to 64 lowercase letters, digits, `-` or
/// `_`, starting with a letter (the document states the same pattern).
fn check_name(name: &str) -> ApiResult<()> {
    let valid = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if valid {
        return Ok(());
    }
    Err(ApiError::validation(
        "name",
        "name: 1 to 64 lowercase letters, digits, `-` or `_`, starting with a letter",
    ))
}

/// An http(s) URL whose host resolves to public addresses only, unless the operator
/// allows it (`outbound.allow_private`), as for notification webhooks.
async fn check_url(state: &AppState, url: &str) -> ApiResult<()> {
    check_public_url(&state.notification_sender.guard, "url", url).await
}

fn name_conflict(error: sqlx::Error) -> ApiError {
    if is_unique_violation(&error) {
        ApiError::new(
            ErrorCode::McpServerNameTaken,
            "an MCP server of that name is registered; choose another name",
        )
    } else {
        error.into()
    }
}

fn not_found() -> ApiError {
    ApiError::not_found("mcp server")
}
