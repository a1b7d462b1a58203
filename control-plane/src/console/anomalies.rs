//! Anomalies: the list with the API's filters in the URL, each acknowledged or resolved
//! with a note, and the detection rules, each enabled or disabled.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use warden_shared::scopes::Scope;

use super::filters::Filters;
use super::form::Posted;
use super::page::{self, Layout, PageError};
use super::session::Signed;
use crate::api::anomalies::service::{self as anomalies, Move};
use crate::api::anomalies::{AcknowledgeInput, Anomaly, AnomalyQuery, ResolveInput};
use crate::api::anomaly_rules::service as rules;
use crate::api::anomaly_rules::{AnomalyRule, UpdateRuleInput};
use crate::api::envelope::{Page, PageQuery};
use crate::auth::require;
use crate::state::AppState;
use crate::validate::Text;

/// Anomalies a page lists.
const PER_PAGE: i64 = 50;

#[derive(Template)]
#[template(path = "anomalies.html")]
struct AnomaliesPage {
    layout: Layout,
    anomalies: Vec<Shown>,
    total: i64,
    page: i64,
    rules: Vec<AnomalyRule>,
    status: String,
    kind: String,
    severity: String,
    agent_id: String,
    newer: Option<String>,
    older: Option<String>,
    may_write: bool,
}

struct Shown {
    anomaly: Anomaly,
    details: String,
}

/// `GET /console/anomalies`.
pub async fn show(
    State(state): State<AppState>,
    signed: Signed<require::AnomalyRead>,
    filters: Filters<AnomalyQuery>,
) -> Result<Response, PageError> {
    let caller = &signed.caller;
    let page = Page::try_from(PageQuery {
        page: filters.query.page,
        limit: Some(PER_PAGE),
    })?;
    let (found, total) = anomalies::list(&state, caller, &filters.query, page).await?;
    let shown = AnomaliesPage {
        layout: signed.layout(&state, "anomalies").await?,
        anomalies: found
            .into_iter()
            .map(|anomaly| Shown {
                details: serde_json::to_string_pretty(&anomaly.details).unwrap_or_default(),
                anomaly,
            })
            .collect(),
        total,
        page: page.page,
        rules: rules::list(&state, caller).await?,
        status: filters.get("status").to_owned(),
        kind: filters.get("type").to_owned(),
        severity: filters.get("severity").to_owned(),
        agent_id: filters.get("agent_id").to_owned(),
        newer: (page.page > 1).then(|| filters.with("page", &(page.page - 1).to_string())),
        older: (page.page * page.limit < total)
            .then(|| filters.with("page", &(page.page + 1).to_string())),
        may_write: caller.has(Scope::AnomalyWrite),
    };
    Ok(page::render(&shown))
}

/// `POST /console/anomalies/{id}/acknowledge`.
pub async fn acknowledge(
    State(state): State<AppState>,
    signed: Signed<require::AnomalyWrite>,
    Path(id): Path<String>,
    Posted(input): Posted<AcknowledgeInput>,
) -> Result<Response, PageError> {
    let note = input.note.map(Text::into_inner);
    anomalies::transition(&state, &signed.caller, &id, Move::Acknowledge, note).await?;
    Ok(Redirect::to(&format!("/console/anomalies#anomaly-{id}")).into_response())
}

/// `POST /console/anomalies/{id}/resolve`.
pub async fn resolve(
    State(state): State<AppState>,
    signed: Signed<require::AnomalyWrite>,
    Path(id): Path<String>,
    Posted(input): Posted<ResolveInput>,
) -> Result<Response, PageError> {
    let resolution = input.resolution.map(Text::into_inner);
    anomalies::transition(&state, &signed.caller, &id, Move::Resolve, resolution).await?;
    Ok(Redirect::to(&format!("/console/anomalies#anomaly-{id}")).into_response())
}

#[derive(serde::Deserialize)]
pub struct Switch {
    enabled: bool,
}

/// `POST /console/anomaly-rules/{id}/enabled`.
pub async fn switch_rule(
    State(state): State<AppState>,
    signed: Signed<require::AnomalyWrite>,
    Path(id): Path<i64>,
    Posted(form): Posted<Switch>,
) -> Result<Response, PageError> {
    let input = UpdateRuleInput {
        anomaly_type: None,
        enabled: Some(form.enabled),
        threshold_config: None,
        notification_config: None,
    };
    rules::update(&state, &signed.caller, id, input).await?;
    Ok(Redirect::to("/console/anomalies#rules-heading").into_response())
}
