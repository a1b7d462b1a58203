//! MCP servers: the tenant's registered servers, each approved from the page; a server's
//! approved tools, the tools whose definition changed since (the approved definition
//! beside the one the server lists now), and its recent tool calls.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::de::IgnoredAny;
use warden_shared::scopes::Scope;

use super::form::Posted;
use super::page::{self, Layout, PageError};
use super::session::Signed;
use crate::api::envelope::Page;
use crate::api::mcp_servers::service as servers;
use crate::api::mcp_servers::{ApprovedTool, McpServer, ServerTools};
use crate::api::tool_calls::{self, ToolCall, ToolCallQuery};
use crate::auth::require;
use crate::state::AppState;
use crate::validate::Text;

/// Servers the list shows (the API's largest page).
const LISTED: i64 = 100;
/// Recent tool calls a server's page shows.
const RECENT_CALLS: i64 = 20;

#[derive(Template)]
#[template(path = "mcp_servers.html")]
struct ServersPage {
    layout: Layout,
    servers: Vec<McpServer>,
    total: i64,
    may_approve: bool,
}

/// `GET /console/mcp-servers`.
pub async fn list(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceRead>,
) -> Result<Response, PageError> {
    let caller = &signed.caller;
    let (servers, total) = servers::list(
        &state,
        caller,
        Page {
            page: 1,
            limit: LISTED,
        },
    )
    .await?;
    let page = ServersPage {
        layout: signed.layout(&state, "mcp").await?,
        servers,
        total,
        may_approve: caller.has(Scope::Admin),
    };
    Ok(page::render(&page))
}

/// A changed tool: the definition approved and the one listed now.
struct Change {
    tool: String,
    approved: String,
    now: String,
}

#[derive(Template)]
#[template(path = "mcp_server.html")]
struct ServerPage {
    layout: Layout,
    server: McpServer,
    tools: ServerTools,
    /// Each approved tool's definition, indented.
    definitions: Vec<(ApprovedTool, String)>,
    changes: Vec<Change>,
    /// Why the server's listing now could not be read, if it could not.
    unreachable: Option<String>,
    calls: Vec<ToolCall>,
    may_approve: bool,
}

fn indented(definition: &serde_json::Value) -> String {
    serde_json::to_string_pretty(definition).unwrap_or_default()
}

/// `GET /console/mcp-servers/{id}`.
pub async fn show(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceRead>,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let caller = &signed.caller;
    let server = servers::get(&state, caller, &id).await?;
    let tools = servers::tools(&state, caller, &id).await?;
    // Only a change makes the page ask the server for its tools now.
    let (changes, unreachable) = match tools.changed.is_empty() {
        true => (Vec::new(), None),
        false => match servers::listed_now(&state, &server, state.clock.now()).await {
            Ok(now) => (compare(&tools, &now), None),
            Err(error) if error.code.status().is_client_error() => {
                (Vec::new(), Some(error.message))
            }
            Err(error) => return Err(error.into()),
        },
    };
    let calls = ToolCallQuery {
        agent_id: None,
        server: Text::try_from(server.name.clone()).ok(),
        tool: None,
        decision: None,
        outcome: None,
        since: None,
        page: None,
        limit: None,
    };
    let recent = Page {
        page: 1,
        limit: RECENT_CALLS,
    };
    let (calls, _) = tool_calls::service::list(&state, caller, &calls, recent).await?;
    let page = ServerPage {
        layout: signed.layout(&state, "mcp").await?,
        definitions: tools
            .tools
            .iter()
            .map(|tool| (tool.clone(), indented(&tool.definition)))
            .collect(),
        server,
        tools,
        changes,
        unreachable,
        calls,
        may_approve: caller.has(Scope::Admin),
    };
    Ok(page::render(&page))
}

/// The changed tools, each approved definition beside the one listed now (either may
/// be absent: a tool added since, or one gone).
fn compare(tools: &ServerTools, now: &[ApprovedTool]) -> Vec<Change> {
    let mut names: Vec<&str> = tools
        .changed
        .iter()
        .map(|drift| drift.tool.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let of = |list: &[ApprovedTool]| {
                list.iter()
                    .find(|tool| tool.name == name)
                    .map_or("(none)".to_owned(), |tool| indented(&tool.definition))
            };
            Change {
                tool: name.to_owned(),
                approved: of(&tools.tools),
                now: of(now),
            }
        })
        .collect()
}

/// `POST /console/mcp-servers/{id}/approve`: approves the tools as the server lists them
/// now.
pub async fn approve(
    State(state): State<AppState>,
    signed: Signed<require::Admin>,
    Path(id): Path<String>,
    Posted(_): Posted<IgnoredAny>,
) -> Result<Response, PageError> {
    servers::approve(&state, &signed.caller, &id).await?;
    Ok(Redirect::to(&format!("/console/mcp-servers/{id}")).into_response())
}
