//! MCP servers (issue: the MCP gateway): the tool servers a tenant's agents may reach
//! through Warden, registered per tenant. Read with `governance:read`, written with
//! `admin`; every change is audited (`mcp_server.created`, `.updated`, `.deleted`).
//!
//! `name` prefixes the server's tools for agents (1–64 lowercase letters, digits, `-`,
//! `_`; unique in the tenant, 409 `mcp_server_name_taken`). `url` is the server's MCP
//! endpoint, checked like notification webhooks: http(s), resolving to public
//! addresses only unless the operator allows a host or network
//! (`outbound.allow_private`; 422 `url_not_allowed`). The server's credential is never
//! stored: `secret_ref` names it in Secrets Manager under the tenant's managed prefix.
//!
//! A server's tools reach agents only once approved: `POST /mcp-servers/{id}/approve`
//! lists them from the server now and pins each definition by fingerprint
//! (`mcp_server.approved`); the proxies withhold a tool whose definition later differs,
//! and report it (`mcp_server.tool_changed`, audited and notified). A changed URL or
//! credential makes a different server: its approval is cleared.

pub(crate) mod service;
mod store;

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, PageQuery};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;
use crate::validate::present;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_servers, create_server))
        .routes(routes!(get_server, update_server, delete_server))
        .routes(routes!(approve_server))
        .routes(routes!(server_tools))
}

/// A registered MCP server.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct McpServer {
    pub id: String,
    pub name: String,
    pub url: String,
    /// The full Secrets Manager name of the server's credential; none: the server takes
    /// no credential.
    pub secret_ref: Option<String>,
    pub enabled: bool,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
    /// When an operator last approved its tools; none: never (or its URL or credential
    /// changed since), and agents see none of its tools.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub approved_at: Option<Timestamp>,
}

/// A tool whose definition an operator approved.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ApprovedTool {
    /// The tool's name on its server (agents see `<server>__<name>` at `/mcp`).
    pub name: String,
    /// SHA-256 of the definition's canonical JSON (without `_meta`).
    pub fingerprint: String,
    /// The definition as the server listed it.
    #[schema(value_type = Object)]
    pub definition: serde_json::Value,
    #[schema(value_type = String, format = DateTime)]
    pub approved_at: Timestamp,
}

/// A definition a proxy saw differ from the approved one (or a tool added after the
/// approval), withheld from agents.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ToolDrift {
    pub tool: String,
    pub fingerprint: String,
    /// None: the tool was not part of the approval.
    pub approved_fingerprint: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    pub seen_at: Timestamp,
}

/// A server's approved tools and what changed since the approval.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ServerTools {
    pub server_id: String,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub approved_at: Option<Timestamp>,
    pub tools: Vec<ApprovedTool>,
    /// Reported since the approval, newest first (at most 1000).
    pub changed: Vec<ToolDrift>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateMcpServerInput {
    /// Prefixes the server's tools: 1 to 64 lowercase letters, digits, `-` or `_`,
    /// starting with a letter, without `__` (the separator of server and tool names).
    #[schema(pattern = "^[a-z](_?[a-z0-9-])*_?$", max_length = 64)]
    pub name: String,
    /// The server's MCP (Streamable HTTP) endpoint, http or https, at most 2000
    /// characters.
    #[schema(max_length = 2000)]
    pub url: String,
    /// The server's credential in Secrets Manager: a name relative to the tenant's
    /// managed prefix (`mcp/github`), the full name, or its ARN.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 512)]
    pub secret_ref: Option<String>,
    /// Default true.
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// Any of a server's fields; `secret_ref: null` removes its credential.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateMcpServerInput {
    #[serde(default)]
    #[schema(pattern = "^[a-z](_?[a-z0-9-])*_?$", max_length = 64)]
    pub name: Option<String>,
    #[serde(default)]
    #[schema(max_length = 2000)]
    pub url: Option<String>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 512)]
    pub secret_ref: Option<Option<String>>,
    #[serde(default)]
    pub enabled: Option<bool>,
}

#[utoipa::path(get, path = "/mcp-servers", tag = "mcp", params(PageQuery),
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "One page of the tenant's MCP servers, by name", body = envelope::Paged<McpServer>)))]
async fn list_servers(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Response> {
    let page = query.try_into()?;
    let (servers, total) = service::list(&state, &caller, page).await?;
    Ok(envelope::paged(servers, page, total))
}

#[utoipa::path(post, path = "/mcp-servers", tag = "mcp", request_body = CreateMcpServerInput,
    security(("bearer" = ["admin"])),
    responses((status = 201, description = "The registered server", body = envelope::Envelope<McpServer>),
        (status = 409, description = "A server of that name is registered (`mcp_server_name_taken`)")))]
async fn create_server(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<CreateMcpServerInput>,
) -> ApiResult<Response> {
    Ok(envelope::created(
        service::create(&state, &caller, input).await?,
    ))
}

#[utoipa::path(get, path = "/mcp-servers/{server_id}", tag = "mcp",
    params(("server_id" = String, Path)), security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "The server", body = envelope::Envelope<McpServer>)))]
async fn get_server(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiPath(server_id): ApiPath<String>,
) -> ApiResult<Response> {
    Ok(envelope::ok(
        service::get(&state, &caller, &server_id).await?,
    ))
}

#[utoipa::path(patch, path = "/mcp-servers/{server_id}", tag = "mcp", request_body = UpdateMcpServerInput,
    params(("server_id" = String, Path)), security(("bearer" = ["admin"])),
    responses((status = 200, description = "The changed server", body = envelope::Envelope<McpServer>),
        (status = 409, description = "A server of that name is registered (`mcp_server_name_taken`)")))]
async fn update_server(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(server_id): ApiPath<String>,
    ApiJson(input): ApiJson<UpdateMcpServerInput>,
) -> ApiResult<Response> {
    Ok(envelope::ok(
        service::update(&state, &caller, &server_id, input).await?,
    ))
}

#[utoipa::path(post, path = "/mcp-servers/{server_id}/approve", tag = "mcp",
    params(("server_id" = String, Path)), security(("bearer" = ["admin"])),
    responses((status = 200, description = "The tools the server lists now, approved as they are defined", body = envelope::Envelope<ServerTools>),
        (status = 422, description = "The server could not be reached or listed (`mcp_server_unreachable`), or its URL is not allowed (`url_not_allowed`)")))]
async fn approve_server(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(server_id): ApiPath<String>,
) -> ApiResult<Response> {
    Ok(envelope::ok(
        service::approve(&state, &caller, &server_id).await?,
    ))
}

#[utoipa::path(get, path = "/mcp-servers/{server_id}/tools", tag = "mcp",
    params(("server_id" = String, Path)), security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "The approved tools and the changes proxies reported since", body = envelope::Envelope<ServerTools>)))]
async fn server_tools(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiPath(server_id): ApiPath<String>,
) -> ApiResult<Response> {
    Ok(envelope::ok(
        service::tools(&state, &caller, &server_id).await?,
    ))
}

#[utoipa::path(delete, path = "/mcp-servers/{server_id}", tag = "mcp",
    params(("server_id" = String, Path)), security(("bearer" = ["admin"])),
    responses((status = 204, description = "Deleted")))]
async fn delete_server(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(server_id): ApiPath<String>,
) -> ApiResult<Response> {
    service::delete(&state, &caller, &server_id).await?;
    Ok(envelope::no_content())
}
