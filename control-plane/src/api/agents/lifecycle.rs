//! Agent lifecycle (spec 4.3): an expiry the proxies enforce (403 `agent_expired` from
//! `expires_at` on), a review schedule, a sponsor; and the agents past their expiry or
//! due for review.
//!
//! `review_frequency` (`weekly` 7 days, `monthly` 30, `quarterly` 91, `annually` 365)
//! sets `review_date` one period from the call: sending it again, even unchanged,
//! records a review and moves the date on; `null` removes the schedule. `expires_at`
//! may lie in the past (an inventory synced late, or expiring an agent now): the agent is
//! then expired at once, listed by `/agents/expired`, refused by the proxies and audited
//! with `expired: true`; `null` removes it.

use axum::extract::State;
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::input::LifecycleInput;
use super::service;
use super::store::Only;
use super::Agent;
use crate::api::envelope::{self, PageQuery, Paged};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(update_lifecycle))
        .routes(routes!(list_expired_agents))
        .routes(routes!(list_agents_due_review))
}

#[utoipa::path(patch, path = "/agents/{agent_id}/lifecycle", tag = "security",
    params(("agent_id" = String, Path)), request_body = LifecycleInput,
    security(("bearer" = ["admin"])),
    responses((status = 204, description = "Updated; a new expiry is in force in every connected proxy when this answers")))]
async fn update_lifecycle(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(input): ApiJson<LifecycleInput>,
) -> ApiResult<Response> {
    service::update_lifecycle(&state, &caller, &agent_id, input).await?;
    Ok(envelope::no_content())
}

#[utoipa::path(get, path = "/agents/expired", tag = "security", params(PageQuery),
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "Agents whose `expires_at` has passed, newest first", body = Paged<Agent>)))]
async fn list_expired_agents(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Response> {
    let page = query.try_into()?;
    let (agents, total) =
        service::list_security_subset(&state, &caller, Only::Expired, page).await?;
    Ok(envelope::paged(agents, page, total))
}

#[utoipa::path(get, path = "/agents/due-review", tag = "security", params(PageQuery),
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "Agents whose `review_date` has passed, newest first", body = Paged<Agent>)))]
async fn list_agents_due_review(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Response> {
    let page = query.try_into()?;
    let (agents, total) =
        service::list_security_subset(&state, &caller, Only::DueReview, page).await?;
    Ok(envelope::paged(agents, page, total))
}
