//! Agents: the list with its filters, an agent's page, and the kill switch (block,
//! quarantine and their undoing), each with a reason and the agent's name typed again.
//! After a change the page says whether every proxy enforces it.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use warden_shared::registry::{AgentStatus, Environment};
use warden_shared::scopes::Scope;

use super::enforcement::{self, Enforced};
use super::form::Posted;
use super::page::{self, span, Layout, PageError};
use super::session::Signed;
use crate::api::agents::{self, Agent, AgentFilter, EnforcementFlag, Reason};
use crate::api::cost::{self, ModelCost, ModelQuery};
use crate::api::envelope::{Page, PageQuery};
use crate::api::health;
use crate::api::owners::{self, Ownership};
use crate::api::policies::evaluations::{self, Filters, PolicyEvaluation};
use crate::api::risk_level::RiskLevel;
use crate::api::tool_calls::{self, ToolCall, ToolCallQuery};
use crate::auth::require;
use crate::error::ApiError;
use crate::health::HealthScore;
use crate::state::AppState;
use crate::validate::Text;

/// The list shows at most this many agents per page (the API's largest page).
const PER_PAGE: i64 = 100;

#[derive(Template)]
#[template(path = "agents.html")]
struct AgentsPage {
    layout: Layout,
    agents: Vec<Agent>,
    total: i64,
    page: i64,
    /// The query of the page before and after this one, when there is one.
    newer: Option<String>,
    older: Option<String>,
    status: String,
    team: String,
    environment: String,
    risk_level: String,
    search: String,
}

#[derive(Deserialize)]
pub struct ListFilter {
    #[serde(default)]
    status: String,
    #[serde(default)]
    team: String,
    #[serde(default)]
    environment: String,
    #[serde(default)]
    risk_level: String,
    #[serde(default)]
    search: String,
    /// Which page of the list, from 1.
    #[serde(default)]
    page: String,
}

impl ListFilter {
    /// The query string of page `page` under the same filters.
    fn query_of(&self, page: i64) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (name, value) in [
            ("search", &self.search),
            ("status", &self.status),
            ("environment", &self.environment),
            ("risk_level", &self.risk_level),
            ("team", &self.team),
        ] {
            if !value.trim().is_empty() {
                query.append_pair(name, value.trim());
            }
        }
        query.append_pair("page", &page.to_string());
        query.finish()
    }
}

/// `GET /console/agents`.
pub async fn list(
    State(state): State<AppState>,
    signed: Signed<require::RegistryRead>,
    Query(filter): Query<ListFilter>,
) -> Result<Response, PageError> {
    let api_filter = AgentFilter {
        status: AgentStatus::parse(&filter.status),
        framework: None,
        team: Some(filter.team.trim().to_owned()).filter(|team| !team.is_empty()),
        environment: Environment::parse(&filter.environment),
        risk_level: RiskLevel::parse(&filter.risk_level),
        search: Text::try_from(filter.search.trim().to_owned()).ok(),
        page: None,
        limit: None,
    };
    let number = match filter.page.trim() {
        "" => 1,
        given => given
            .parse()
            .map_err(|_| ApiError::validation("page", "page: must be a whole number"))?,
    };
    let page_of = Page::try_from(PageQuery {
        page: Some(number),
        limit: Some(PER_PAGE),
    })?;
    let (agents, total) =
        agents::service::list_agents(&state, &signed.caller, &api_filter, page_of).await?;
    let page = AgentsPage {
        layout: signed.layout(&state, "agents").await?,
        agents,
        total,
        page: page_of.page,
        newer: (page_of.page > 1).then(|| filter.query_of(page_of.page - 1)),
        older: (page_of.page * page_of.limit < total).then(|| filter.query_of(page_of.page + 1)),
        status: api_filter.status.map_or("", AgentStatus::as_str).to_owned(),
        team: api_filter.team.unwrap_or_default(),
        environment: api_filter
            .environment
            .map_or("", Environment::as_str)
            .to_owned(),
        risk_level: api_filter
            .risk_level
            .map_or("", RiskLevel::as_str)
            .to_owned(),
        search: api_filter
            .search
            .as_ref()
            .map_or("", Text::as_str)
            .to_owned(),
    };
    Ok(page::render(&page))
}

#[derive(Template)]
#[template(path = "agent.html")]
struct AgentPage {
    layout: Layout,
    agent: Agent,
    heartbeat: String,
    may_switch: bool,
    enforced: Option<Enforced>,
    health: Option<HealthScore>,
    owners: Vec<Ownership>,
    /// The latest policy decisions about the agent's requests (`governance:read`).
    decisions: Option<Vec<PolicyEvaluation>>,
    /// The latest tool calls it made through the MCP gateway (`governance:read`).
    tool_calls: Option<Vec<ToolCall>>,
    /// What it spent this month, per provider and model (`cost:read`).
    costs: Option<ModelCosts>,
}

/// An agent's spend this month by provider and model, most expensive first.
struct ModelCosts {
    models: Vec<ModelCost>,
    total: ModelCost,
}

impl ModelCosts {
    async fn of_agent(
        state: &AppState,
        signed: &Signed<require::RegistryRead>,
        id: &str,
    ) -> Result<ModelCosts, PageError> {
        let query = ModelQuery {
            from: None,
            to: None,
            agent_id: Some(id.to_owned()),
            team: None,
        };
        let models = cost::service::cost_by_model(state, &signed.caller, &query).await?;
        let mut total = ModelCost {
            model_provider: String::new(),
            model_name: String::new(),
            total_cost_usd: 0.0,
            input_tokens: 0,
            output_tokens: 0,
            requests: 0,
        };
        for model in &models {
            total.total_cost_usd += model.total_cost_usd;
            total.input_tokens += model.input_tokens;
            total.output_tokens += model.output_tokens;
            total.requests += model.requests;
        }
        Ok(ModelCosts { models, total })
    }
}

/// How many recent decisions and tool calls the agent's page lists.
const RECENT: i64 = 10;

/// `GET /console/agents/{id}`.
pub async fn show(
    State(state): State<AppState>,
    signed: Signed<require::RegistryRead>,
    Path(id): Path<String>,
    Query(enforced): Query<Enforced>,
) -> Result<Response, PageError> {
    let agent = agents::service::get_agent(&state, &signed.caller, &id).await?;
    let now = state.clock.now().as_millis();
    let heartbeat = agent.last_heartbeat.map_or("never".to_owned(), |at| {
        format!("{} ago", span(now - at.as_millis()))
    });
    let caller = &signed.caller;
    let recent = Page {
        page: 1,
        limit: RECENT,
    };
    let health = match caller.has(Scope::MonitoringRead) {
        true => Some(health::service::agent_health(&state, caller, &id).await?),
        false => None,
    };
    let (decisions, tool_calls) = match caller.has(Scope::GovernanceRead) {
        true => {
            let filters = Filters {
                policy_id: None,
                agent_id: Some(&id),
                result: None,
            };
            let calls = ToolCallQuery {
                // A valid agent id (it was found above) is a valid filter.
                agent_id: crate::validate::Text::try_from(id.clone()).ok(),
                server: None,
                tool: None,
                decision: None,
                outcome: None,
                since: None,
                page: None,
                limit: None,
            };
            let decisions = evaluations::list::evaluations(&state, caller, &filters, recent);
            let calls = tool_calls::service::list(&state, caller, &calls, recent);
            (Some(decisions.await?.0), Some(calls.await?.0))
        }
        false => (None, None),
    };
    let costs = match caller.has(Scope::CostRead) {
        true => Some(ModelCosts::of_agent(&state, &signed, &id).await?),
        false => None,
    };
    let page = AgentPage {
        layout: signed.layout(&state, "agents").await?,
        owners: owners::service::owners_of(&state, caller, &id).await?,
        tool_calls,
        agent,
        heartbeat,
        may_switch: caller.has(Scope::Admin),
        enforced: Some(enforced).filter(Enforced::is_known),
        health,
        decisions,
        costs,
    };
    Ok(page::render(&page))
}

#[derive(Deserialize)]
pub struct Switch {
    #[serde(default)]
    reason: String,
    /// The agent's name, typed again.
    #[serde(default)]
    confirm: String,
}

/// `POST /console/agents/{id}/{action}`: `block`, `unblock`, `quarantine` or `release`.
pub async fn switch(
    State(state): State<AppState>,
    signed: Signed<require::Admin>,
    Path((id, action)): Path<(String, String)>,
    Posted(form): Posted<Switch>,
) -> Result<Response, PageError> {
    let (flag, on) = match action.as_str() {
        "block" => (EnforcementFlag::Blocked, true),
        "unblock" => (EnforcementFlag::Blocked, false),
        "quarantine" => (EnforcementFlag::Quarantined, true),
        "release" => (EnforcementFlag::Quarantined, false),
        _ => return Err(PageError::bad_form("no such action")),
    };
    let agent = agents::service::get_agent(&state, &signed.caller, &id).await?;
    if form.confirm.trim() != agent.name {
        return Err(PageError::bad_form(
            "type the agent's name exactly to confirm; nothing was changed",
        ));
    }
    let reason = match form.reason.trim() {
        "" if on => return Err(PageError::bad_form("say why (a reason is required)")),
        "" => None,
        reason => Some(
            Reason::try_from(reason.to_owned())
                .map_err(|_| PageError::bad_form("a reason has at most 1,000 characters"))?,
        ),
    };
    let write = agents::service::set_flag(&state, &signed.caller, &id, flag, on, reason.as_ref());
    let ((), enforced) = enforcement::apply(&state, write).await?;
    let target = format!("/console/agents/{}?{}", agent.id, enforced.query());
    Ok(Redirect::to(&target).into_response())
}
