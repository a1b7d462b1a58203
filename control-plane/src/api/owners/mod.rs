//! Agent owners (spec 2.4, 4.3): the people, teams and service accounts answerable for
//! an agent, named by the caller's own identifiers, each with what it may do. Adding and
//! removing needs `admin`; reading, `registry:read`. Record ids are integers. An owner is
//! recorded once per agent and owner type (409 `owner_exists`).

pub(crate) mod service;
mod store;

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::agents::Agent;
use crate::api::envelope::{self, Envelope};
use crate::api::extract::{ApiJson, ApiPath};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;
use crate::validate::Text;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_owners, add_owner))
        .routes(routes!(remove_owner))
        .routes(routes!(list_owned_agents))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OwnerType {
    User,
    Team,
    ServiceAccount,
}

impl OwnerType {
    pub const fn as_str(self) -> &'static str {
        match self {
            OwnerType::User => "user",
            OwnerType::Team => "team",
            OwnerType::ServiceAccount => "service_account",
        }
    }

    pub fn parse(text: &str) -> Option<OwnerType> {
        [OwnerType::User, OwnerType::Team, OwnerType::ServiceAccount]
            .into_iter()
            .find(|kind| kind.as_str() == text)
    }
}

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct Permissions {
    pub can_invoke: bool,
    pub can_configure: bool,
    pub can_delete: bool,
}

/// An ownership record.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Ownership {
    /// The record's id, used to remove it.
    pub id: i64,
    pub agent_id: String,
    pub owner_type: OwnerType,
    pub owner_id: String,
    pub owner_name: String,
    pub permissions: Permissions,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
}

/// Permissions as given; omitted ones take the defaults (`can_invoke` true, the others
/// false).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PermissionsInput {
    pub can_invoke: Option<bool>,
    pub can_configure: Option<bool>,
    pub can_delete: Option<bool>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddOwnerInput {
    pub owner_type: OwnerType,
    /// The caller's identifier for the owner (1 to 200 characters).
    pub owner_id: Text<1, 200>,
    pub owner_name: Text<1, 200>,
    pub permissions: Option<PermissionsInput>,
}

#[utoipa::path(post, path = "/agents/{agent_id}/owners", tag = "security",
    params(("agent_id" = String, Path)), request_body = AddOwnerInput,
    security(("bearer" = ["admin"])),
    responses((status = 201, description = "The ownership record, with its integer id", body = Envelope<Ownership>),
        (status = 409, description = "That owner already owns the agent (`owner_exists`)")))]
async fn add_owner(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(input): ApiJson<AddOwnerInput>,
) -> ApiResult<Response> {
    let record = service::add_owner(&state, &caller, &agent_id, input).await?;
    Ok(envelope::created(record))
}

#[utoipa::path(get, path = "/agents/{agent_id}/owners", tag = "security",
    params(("agent_id" = String, Path)), security(("bearer" = ["registry:read"])),
    responses((status = 200, description = "The agent's owners, oldest first", body = Envelope<Vec<Ownership>>)))]
async fn list_owners(
    caller: Authorized<require::RegistryRead>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult<Response> {
    let owners = service::owners_of(&state, &caller, &agent_id).await?;
    Ok(envelope::ok(owners))
}

#[utoipa::path(delete, path = "/agents/{agent_id}/owners/{owner_id}", tag = "security",
    params(("agent_id" = String, Path), ("owner_id" = i64, Path, description = "The ownership record's id")),
    security(("bearer" = ["admin"])),
    responses((status = 204, description = "Removed")))]
async fn remove_owner(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath((agent_id, record_id)): ApiPath<(String, String)>,
) -> ApiResult<Response> {
    service::remove_owner(&state, &caller, &agent_id, &record_id).await?;
    Ok(envelope::no_content())
}

#[utoipa::path(get, path = "/owners/{owner_id}/agents", tag = "security",
    params(("owner_id" = String, Path, description = "The owner's external id")),
    security(("bearer" = ["registry:read"])),
    responses((status = 200, description = "The live agents it owns", body = Envelope<Vec<Agent>>)))]
async fn list_owned_agents(
    caller: Authorized<require::RegistryRead>,
    State(state): State<AppState>,
    ApiPath(owner_id): ApiPath<String>,
) -> ApiResult<Response> {
    let agents = service::agents_of(&state, &caller, &owner_id).await?;
    Ok(envelope::ok(agents))
}
