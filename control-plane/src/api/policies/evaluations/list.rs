//! `GET /policy-evaluations`: the two kinds of decisions (on usage records, and
//! `policy_decisions` rows) read as one list, newest first.

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use utoipa::IntoParams;
use warden_shared::policy::Outcome;

use super::store::{self, Filters};
use super::PolicyEvaluation;
use crate::api::envelope::{self, Page, PageQuery, Paged, COUNT_LIMIT};
use crate::api::extract::ApiQuery;
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;
use crate::validate::Text;

/// One page of the tenant's evaluation records under `filters`, and how many there are
/// (counted up to [`COUNT_LIMIT`] + 1).
pub async fn evaluations(
    state: &AppState,
    caller: &crate::auth::Caller,
    filters: &Filters<'_>,
    page: Page,
) -> ApiResult<(Vec<PolicyEvaluation>, i64)> {
    let pool = state.db.pool();
    let evaluations = store::evaluations_page(pool, &caller.tenant_id, filters, page).await?;
    let counted =
        store::count_evaluations(pool, &caller.tenant_id, filters, COUNT_LIMIT + 1).await?;
    Ok((evaluations, counted))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EvaluationQuery {
    pub policy_id: Option<i64>,
    pub agent_id: Option<Text<1, 100>>,
    #[param(value_type = Option<String>, pattern = "^(pass|fail|skip)$")]
    pub result: Option<Outcome>,
    #[param(minimum = 1, maximum = 1000000, default = 1)]
    pub page: Option<i64>,
    #[param(minimum = 1, maximum = 100, default = 20)]
    pub limit: Option<i64>,
}

/// Newest first by when the request ended: a refused request ends when it is decided
/// (`evaluated_at`), a forwarded one when its answer does (its usage record's time, whose
/// index serves the order). Then by decision, and by the results' order within one.
#[utoipa::path(get, path = "/policy-evaluations", tag = "governance", params(EvaluationQuery),
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "One page of evaluation records, newest first by when the request ended (a refused request when it was decided, a forwarded one when its answer ended)", body = Paged<PolicyEvaluation>)))]
pub async fn list_evaluations(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<EvaluationQuery>,
) -> ApiResult<Response> {
    let page: Page = PageQuery {
        page: query.page,
        limit: query.limit,
    }
    .try_into()?;
    let filters = Filters {
        policy_id: query.policy_id,
        agent_id: query.agent_id.as_ref().map(Text::as_str),
        result: query.result.map(Outcome::as_str),
    };
    let (evaluations, counted) = evaluations(&state, &caller, &filters, page).await?;
    Ok(envelope::paged_counted(
        evaluations,
        page,
        counted.min(COUNT_LIMIT),
        counted > COUNT_LIMIT,
    ))
}
