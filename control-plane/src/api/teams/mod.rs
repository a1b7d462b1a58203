//! Teams (spec 2.3, 4.2): named groups of agents, unique by name within a tenant.

mod service;
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
use crate::validate::Text;

pub use service::find_or_create_team_id;
pub use store::find_id_by_name as find_team_id_by_name;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_teams, create_team))
        .routes(routes!(get_team, update_team, delete_team))
}

/// A team as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Team {
    pub id: String,
    pub name: String,
    /// Agents currently assigned (deleted agents are not counted).
    pub agent_count: i64,
    /// This calendar month's spend of the team's agents, from the cost ledger.
    #[serde(serialize_with = "crate::api::money::plain")]
    pub monthly_cost_usd: f64,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
}

/// A team name: 1 to 100 characters.
pub type TeamName = Text<1, 100>;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TeamInput {
    pub name: TeamName,
}

#[utoipa::path(get, path = "/teams", tag = "teams", params(PageQuery),
    security(("bearer" = ["registry:read"])),
    responses((status = 200, description = "One page of the tenant's teams", body = envelope::Paged<Team>)))]
async fn list_teams(
    caller: Authorized<require::RegistryRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Response> {
    let page = query.try_into()?;
    let (teams, total) = service::list_teams(&state, &caller, page).await?;
    Ok(envelope::paged(teams, page, total))
}

#[utoipa::path(post, path = "/teams", tag = "teams",
    request_body(content = TeamInput, example = json!({ "name": "platform" })),
    security(("bearer" = ["registry:write"])),
    responses((status = 201, description = "The new team", body = envelope::Envelope<Team>),
        (status = 409, description = "A team of that name exists (`team_name_taken`)")))]
async fn create_team(
    caller: Authorized<require::RegistryWrite>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<TeamInput>,
) -> ApiResult<Response> {
    let team = service::create_team(&state, &caller, input.name).await?;
    Ok(envelope::created(team))
}

#[utoipa::path(get, path = "/teams/{team_id}", tag = "teams",
    params(("team_id" = String, Path)), security(("bearer" = ["registry:read"])),
    responses((status = 200, description = "The team", body = envelope::Envelope<Team>)))]
async fn get_team(
    caller: Authorized<require::RegistryRead>,
    State(state): State<AppState>,
    ApiPath(team_id): ApiPath<String>,
) -> ApiResult<Response> {
    Ok(envelope::ok(
        service::get_team(&state, &caller, &team_id).await?,
    ))
}

#[utoipa::path(patch, path = "/teams/{team_id}", tag = "teams",
    request_body(content = TeamInput, example = json!({ "name": "platform-renamed" })),
    params(("team_id" = String, Path)), security(("bearer" = ["registry:write"])),
    responses((status = 200, description = "The renamed team", body = envelope::Envelope<Team>),
        (status = 409, description = "A team of that name exists (`team_name_taken`)")))]
async fn update_team(
    caller: Authorized<require::RegistryWrite>,
    State(state): State<AppState>,
    ApiPath(team_id): ApiPath<String>,
    ApiJson(input): ApiJson<TeamInput>,
) -> ApiResult<Response> {
    let team = service::rename_team(&state, &caller, &team_id, input.name).await?;
    Ok(envelope::ok(team))
}

#[utoipa::path(delete, path = "/teams/{team_id}", tag = "teams",
    params(("team_id" = String, Path)), security(("bearer" = ["registry:write"])),
    responses((status = 204, description = "Deleted"),
        (status = 409, description = "Agents are still assigned (`team_has_agents`)")))]
async fn delete_team(
    caller: Authorized<require::RegistryWrite>,
    State(state): State<AppState>,
    ApiPath(team_id): ApiPath<String>,
) -> ApiResult<Response> {
    service::delete_team(&state, &caller, &team_id).await?;
    Ok(envelope::no_content())
}
