//! One agent's EU AI Act obligations: its risk classification with the rules' suggestion
//! and their evidence (and the form to classify it), its FRIA (write a new version,
//! submit a draft), and its transparency card as a printable page.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use warden_shared::scopes::Scope;

use super::form::Posted;
use super::page::{self, Layout, PageError};
use super::session::Signed;
use crate::api::agents::{self, Agent};
use crate::api::compliance::transparency::{self, TransparencyCard};
use crate::api::fria::{self, FriaInput, FriaWithHistory};
use crate::api::risk::{self, ClassifyInput, RiskClassification, Suggestion};
use crate::auth::require;
use crate::error::ErrorCode;
use crate::state::AppState;

#[derive(Template)]
#[template(path = "agent_compliance.html")]
struct AgentCompliancePage {
    layout: Layout,
    agent: Agent,
    current: Option<RiskClassification>,
    suggestion: Suggestion,
    fria: Option<FriaWithHistory>,
    may_write: bool,
}

/// `GET /console/agents/{id}/compliance`.
pub async fn show(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceRead>,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let caller = &signed.caller;
    let agent = agents::service::get_agent(&state, caller, &id).await?;
    let current = absent_if_not_found(risk::service::current(&state, caller, &id).await)?;
    let suggestion = risk::service::suggest(&state, caller, &id).await?;
    let fria = absent_if_not_found(fria::service::newest(&state, caller, &id).await)?;
    let page = AgentCompliancePage {
        layout: signed.layout(&state, "agents").await?,
        agent,
        current,
        suggestion,
        fria,
        may_write: caller.has(Scope::GovernanceWrite),
    };
    Ok(page::render(&page))
}

/// A 404 (nothing recorded yet) as `None`; any other error stays one.
fn absent_if_not_found<T>(
    result: Result<T, crate::error::ApiError>,
) -> Result<Option<T>, crate::error::ApiError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(error) if error.code == ErrorCode::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

fn back_to(id: &str, anchor: &str) -> Response {
    Redirect::to(&format!("/console/agents/{id}/compliance#{anchor}")).into_response()
}

/// `POST /console/agents/{id}/risk-classification`.
pub async fn classify(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceWriteWithRisk>,
    Path(id): Path<String>,
    Posted(input): Posted<ClassifyInput>,
) -> Result<Response, PageError> {
    risk::service::classify(&state, &signed.caller, &id, input).await?;
    Ok(back_to(&id, "risk-heading"))
}

/// `POST /console/agents/{id}/fria`: a new version, a draft.
pub async fn write_fria(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceWrite>,
    Path(id): Path<String>,
    Posted(input): Posted<FriaInput>,
) -> Result<Response, PageError> {
    fria::service::create(&state, &signed.caller, &id, input).await?;
    Ok(back_to(&id, "fria-heading"))
}

/// `POST /console/agents/{id}/fria/{fria_id}/submit`.
pub async fn submit_fria(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceWrite>,
    Path((id, fria_id)): Path<(String, String)>,
    Posted(_): Posted<serde::de::IgnoredAny>,
) -> Result<Response, PageError> {
    fria::service::submit(&state, &signed.caller, &fria_id).await?;
    Ok(back_to(&id, "fria-heading"))
}

#[derive(Template)]
#[template(path = "transparency_card.html")]
struct CardPage {
    layout: Layout,
    card: TransparencyCard,
}

/// `GET /console/agents/{id}/transparency-card`: the card, laid out to print.
pub async fn card(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceRead>,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let caller = &signed.caller;
    let card = transparency::card(&state, caller, &id).await?;
    let page = CardPage {
        layout: signed.layout(&state, "agents").await?,
        card,
    };
    Ok(page::render(&page))
}
