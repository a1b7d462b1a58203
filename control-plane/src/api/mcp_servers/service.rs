//! The rules of MCP servers: names that can prefix tool names, URLs through the outbound
//! guard (SSRF), credentials only as references under the tenant's managed prefix, audit.

use serde_json::json;
use warden_shared::ids::{is_valid_id, new_id, IdKind};

use super::{
    store, ApprovedTool, CreateMcpServerInput, McpServer, ServerTools, UpdateMcpServerInput,
};
use crate::api::envelope::Page;
use crate::api::managed_keys::tenant_secret_ref;
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, ChangeKind, Proxies};
use crate::db::{is_unique_violation, WriteTx};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::notifications::channel::check_public_url;
use crate::state::AppState;
use warden_shared::timestamp::Timestamp;

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
        approved_at: None,
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
    let (url_before, secret_before) = (server.url.clone(), server.secret_ref.clone());
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
    // Another URL or credential is another server: what was approved of the old one
    // says nothing of it.
    let other_server = server.url != url_before || server.secret_ref != secret_before;
    if other_server {
        server.approved_at = None;
    }
    let mut tx = state.db.begin_write().await?;
    store::update(&mut *tx, &caller.tenant_id, &server)
        .await
        .map_err(name_conflict)?;
    if other_server {
        store::delete_pins(&mut *tx, &caller.tenant_id, &server.id).await?;
    }
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
    store::delete_pins(&mut *tx, &caller.tenant_id, id).await?;
    audit(&mut tx, caller, &server, "mcp_server.deleted").await?;
    tx.commit().await?;
    Ok(())
}

/// Lists the server's tools now and approves each definition as it is: the pins the
/// proxies hold agents' listings and calls to. Replaces an earlier approval.
pub async fn approve(state: &AppState, caller: &Caller, id: &str) -> ApiResult<ServerTools> {
    let mut server = get(state, caller, id).await?;
    let now = state.clock.now();
    let tools = listed_now(state, &server, now).await?;
    server.approved_at = Some(now);
    server.updated_at = now;
    let mut tx = state.db.begin_write().await?;
    store::update(&mut *tx, &caller.tenant_id, &server).await?;
    store::replace_pins(&mut tx, &caller.tenant_id, &server.id, &tools).await?;
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "mcp_server.approved",
            target_type: "mcp_server",
            target_id: &server.id,
            details: json!({
                "name": server.name,
                "url": server.url,
                "tools": tools
                    .iter()
                    .map(|tool| json!({ "name": tool.name, "fingerprint": tool.fingerprint }))
                    .collect::<Vec<_>>(),
            }),
        },
        Proxies::Reload(ChangeKind::McpServer),
    )
    .await?;
    tx.commit().await?;
    Ok(ServerTools {
        server_id: server.id,
        approved_at: server.approved_at,
        tools,
        changed: Vec::new(),
    })
}

/// The server's tools as it lists them now, in name order, each stamped `now`: what an
/// approval at `now` would pin.
pub async fn listed_now(
    state: &AppState,
    server: &McpServer,
    now: Timestamp,
) -> ApiResult<Vec<ApprovedTool>> {
    // Checked again, for a clear 422: the name may resolve elsewhere than when the server
    // was registered. The fetch resolves it once more under the same rules.
    check_url(state, &server.url).await?;
    let credential = match &server.secret_ref {
        Some(secret_ref) => Some(
            warden_proxy::read_secret(&state.config.proxy.secrets_manager, secret_ref)
                .await
                .map_err(|error| unreachable(format!("its credential: {error}")))?
                .expose()
                .to_owned(),
        ),
        None => None,
    };
    let guard = &state.notification_sender.guard;
    let definitions = warden_proxy::fetch_definitions(&server.url, credential, guard.allowance())
        .await
        .map_err(|error| unreachable(error.to_string()))?;
    let mut tools: Vec<ApprovedTool> = definitions
        .into_iter()
        .map(|definition| ApprovedTool {
            name: definition.name,
            fingerprint: definition.fingerprint,
            definition: definition.definition,
            approved_at: now,
        })
        .collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    tools.dedup_by(|a, b| a.name == b.name);
    Ok(tools)
}

pub async fn tools(state: &AppState, caller: &Caller, id: &str) -> ApiResult<ServerTools> {
    let server = get(state, caller, id).await?;
    let pool = state.db.pool();
    let tools = store::pins(pool, &caller.tenant_id, &server.id).await?;
    let changed = match server.approved_at {
        Some(at) => store::drifts(pool, &caller.tenant_id, &server.id, at.as_millis()).await?,
        None => Vec::new(),
    };
    Ok(ServerTools {
        server_id: server.id,
        approved_at: server.approved_at,
        tools,
        changed,
    })
}

fn unreachable(reason: String) -> ApiError {
    ApiError::new(
        ErrorCode::McpServerUnreachable,
        format!("the MCP server could not be approved: {reason}"),
    )
    .with_details(json!({ "reason": reason }))
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
    if warden_shared::mcp::is_server_name(name) {
        return Ok(());
    }
    Err(ApiError::validation(
        "name",
        "name: 1 to 64 lowercase letters, digits, `-` or `_`, starting with a letter, \
         without `__` (which separates server and tool names)",
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
