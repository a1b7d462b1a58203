//! Compliance for a compliance officer: the EU AI Act readiness score with its
//! components and recommendations, and serious incidents (Article 73): reported from a
//! form, each with its reporting deadline counting down, updated (status, notes, the
//! authority notified), and its evidence pack downloaded. An agent's own obligations
//! (risk classification, FRIA, transparency card) are on its compliance page
//! (`agent_compliance`).

use askama::Template;
use axum::extract::{Path, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::response::{IntoResponse, Redirect, Response};
use warden_shared::scopes::Scope;

use super::filters::Filters;
use super::form::Posted;
use super::page::{self, span, Layout, PageError};
use super::session::Signed;
use crate::api::compliance::readiness::{self, Readiness};
use crate::api::envelope::{Page, PageQuery};
use crate::api::incidents::{
    self, EvidenceQuery, Incident, IncidentQuery, ReportIncidentInput, UpdateIncidentInput,
};
use crate::auth::require;
use crate::state::AppState;

/// Incidents a page lists.
const PER_PAGE: i64 = 50;

#[derive(Template)]
#[template(path = "compliance.html")]
struct CompliancePage {
    layout: Layout,
    readiness: Readiness,
    incidents: Vec<Listed>,
    total: i64,
    status: String,
    may_report: bool,
}

/// An incident as a row: its deadline as a person reads it.
struct Listed {
    incident: Incident,
    deadline: String,
}

/// How the reporting deadline stands, in words: `due in 3 d 4 h`, `overdue by 2 h`,
/// `met`, `late`.
fn deadline_of(incident: &Incident, now: i64) -> String {
    let reporting = &incident.reporting;
    match reporting.status {
        "pending" => format!(
            "due in {} ({})",
            span(reporting.due_at.as_millis() - now),
            reporting.due_at
        ),
        "overdue" => format!(
            "overdue by {} (was due {})",
            span(now - reporting.due_at.as_millis()),
            reporting.due_at
        ),
        "met" => "met: the authority was notified in time".to_owned(),
        "late" => "late: the authority was notified after the deadline".to_owned(),
        other => other.to_owned(),
    }
}

/// `GET /console/compliance`.
pub async fn show(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceRead>,
    filters: Filters<IncidentQuery>,
) -> Result<Response, PageError> {
    let caller = &signed.caller;
    let readiness = readiness::assess(&state, caller).await?;
    let page = Page::try_from(PageQuery {
        page: filters.query.page,
        limit: Some(PER_PAGE),
    })?;
    let (incidents, total) = incidents::service::list(&state, caller, &filters.query, page).await?;
    let now = state.clock.now().as_millis();
    let page = CompliancePage {
        layout: signed.layout(&state, "compliance").await?,
        readiness,
        incidents: incidents
            .into_iter()
            .map(|incident| Listed {
                deadline: deadline_of(&incident, now),
                incident,
            })
            .collect(),
        total,
        status: filters.get("status").to_owned(),
        may_report: caller.has(Scope::GovernanceWrite),
    };
    Ok(page::render(&page))
}

/// `POST /console/incidents`: reports an incident, then shows it.
pub async fn report(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceWrite>,
    Posted(input): Posted<ReportIncidentInput>,
) -> Result<Response, PageError> {
    let incident = incidents::service::report(&state, &signed.caller, input).await?;
    Ok(Redirect::to(&format!("/console/incidents/{}", incident.id)).into_response())
}

#[derive(Template)]
#[template(path = "incident.html")]
struct IncidentPage {
    layout: Layout,
    incident: Incident,
    deadline: String,
    may_update: bool,
}

/// `GET /console/incidents/{id}`.
pub async fn incident(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceRead>,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let caller = &signed.caller;
    let incident = incidents::service::get(&state, caller, &id).await?;
    let page = IncidentPage {
        layout: signed.layout(&state, "compliance").await?,
        deadline: deadline_of(&incident, state.clock.now().as_millis()),
        incident,
        may_update: caller.has(Scope::GovernanceWrite),
    };
    Ok(page::render(&page))
}

/// `POST /console/incidents/{id}`: a status change, a note, the authority notified.
pub async fn update(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceWrite>,
    Path(id): Path<String>,
    Posted(input): Posted<UpdateIncidentInput>,
) -> Result<Response, PageError> {
    incidents::service::update(&state, &signed.caller, &id, input).await?;
    Ok(Redirect::to(&format!("/console/incidents/{id}")).into_response())
}

/// `GET /console/incidents/{id}/evidence-pack`: the pack as a JSON file (the API's
/// `window_hours` in the URL).
pub async fn evidence_pack(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceReadWithEvidence>,
    Path(id): Path<String>,
    filters: Filters<EvidenceQuery>,
) -> Result<Response, PageError> {
    let pack = incidents::evidence::pack(&state, &signed.caller, &id, &filters.query).await?;
    let body = serde_json::to_vec_pretty(&pack)
        .map_err(|error| PageError::from(crate::error::ApiError::internal(error)))?;
    Ok((
        [
            (CONTENT_TYPE, "application/json".to_owned()),
            (
                CONTENT_DISPOSITION,
                format!("attachment; filename=\"evidence-pack-{id}.json\""),
            ),
            (CACHE_CONTROL, "no-store".to_owned()),
        ],
        body,
    )
        .into_response())
}
