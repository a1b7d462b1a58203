//! Fundamental rights impact assessments (spec 2.14, 3.5, 4.9; EU AI Act Art. 27).
//! Reading needs `governance:read`, writing `governance:write`.
//!
//! The six fields answer Art. 27(1) point by point: `processes` (a) the deployer's
//! processes in which the system is used for its intended purpose; `frequency_and_scope`
//! (b) the period of time within which, and the frequency with which, it is intended to
//! be used; `categories_of_persons` (c) the categories of natural persons and groups
//! likely to be affected; `specific_risks` (d) the specific risks of harm likely to affect
//! them; `human_oversight_measures` (e) the human oversight measures, according to the
//! instructions for use; `risk_mitigation_measures` (f) the measures to be taken if those
//! risks materialise, including internal governance and complaint mechanisms.
//!
//! Every `POST /agents/{id}/fria` makes a new `draft` version (1, 2, ...), keeping every
//! earlier one; `GET` answers the newest with the list of versions. `POST
//! /fria/{id}/submit` makes a draft `submitted`, after which it never changes (a second
//! submit is 409 `fria_already_submitted`). Both writes are audited (`fria.created`,
//! `fria.submitted`).

pub(crate) mod service;
mod store;

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope};
use crate::api::extract::{ApiJson, ApiPath};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;
use crate::validate::Text;

pub use service::newest_of;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_fria, create_fria))
        .routes(routes!(submit_fria))
}

/// The six answers of Art. 27(1)(a)–(f), each 1 to 10,000 characters.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FriaInput {
    /// (a) The processes in which the agent is used for its intended purpose.
    pub processes: Text<1, 10_000>,
    /// (b) The period of time and frequency of use.
    pub frequency_and_scope: Text<1, 10_000>,
    /// (c) The categories of natural persons and groups likely to be affected.
    pub categories_of_persons: Text<1, 10_000>,
    /// (d) The specific risks of harm likely to affect them.
    pub specific_risks: Text<1, 10_000>,
    /// (e) The human oversight measures.
    pub human_oversight_measures: Text<1, 10_000>,
    /// (f) The measures if the risks materialise, governance and complaint mechanisms.
    pub risk_mitigation_measures: Text<1, 10_000>,
}

/// One version of an agent's assessment.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Fria {
    pub id: String,
    pub agent_id: String,
    pub version: i64,
    /// `draft` or `submitted`.
    pub status: String,
    pub processes: String,
    pub frequency_and_scope: String,
    pub categories_of_persons: String,
    pub specific_risks: String,
    pub human_oversight_measures: String,
    pub risk_mitigation_measures: String,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    pub created_by: String,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub submitted_at: Option<Timestamp>,
    pub submitted_by: Option<String>,
}

/// One line of an agent's history of assessments.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FriaVersion {
    pub id: String,
    pub version: i64,
    pub status: String,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub submitted_at: Option<Timestamp>,
}

/// The newest assessment and every version, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct FriaWithHistory {
    #[serde(flatten)]
    pub fria: Fria,
    pub versions: Vec<FriaVersion>,
}

#[utoipa::path(get, path = "/agents/{agent_id}/fria", tag = "compliance",
    params(("agent_id" = String, Path)), security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "The agent's newest assessment and its versions; 404 when it has none", body = Envelope<FriaWithHistory>)))]
async fn get_fria(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult<Response> {
    let fria = service::newest(&state, &caller, &agent_id).await?;
    Ok(envelope::ok(fria))
}

#[utoipa::path(post, path = "/agents/{agent_id}/fria", tag = "compliance",
    params(("agent_id" = String, Path)), request_body = FriaInput,
    security(("bearer" = ["governance:write"])),
    responses((status = 201, description = "A new draft version", body = Envelope<Fria>)))]
async fn create_fria(
    caller: Authorized<require::GovernanceWrite>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(input): ApiJson<FriaInput>,
) -> ApiResult<Response> {
    let fria = service::create(&state, &caller, &agent_id, input).await?;
    Ok(envelope::created(fria))
}

#[utoipa::path(post, path = "/fria/{fria_id}/submit", tag = "compliance",
    params(("fria_id" = String, Path)), security(("bearer" = ["governance:write"])),
    responses((status = 204, description = "Submitted; it never changes again"),
        (status = 409, description = "Already submitted (`fria_already_submitted`)")))]
async fn submit_fria(
    caller: Authorized<require::GovernanceWrite>,
    State(state): State<AppState>,
    ApiPath(fria_id): ApiPath<String>,
) -> ApiResult<Response> {
    service::submit(&state, &caller, &fria_id).await?;
    Ok(envelope::no_content())
}
