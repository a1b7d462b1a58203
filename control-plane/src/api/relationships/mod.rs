//! Relationships (spec 2.20, 4.3): what each agent calls, from the ledger — the models
//! and their providers, with request counts over the last 30 days — per agent and as one
//! graph of the tenant. Tools and agents an agent calls appear once agents report them
//! (the MCP gateway); until then those lists are empty. `registry:read`.

mod store;

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::Response;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::agents::get_agent_for;
use crate::api::envelope::{self, Envelope};
use crate::api::extract::ApiPath;
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;

const WINDOW_MS: i64 = 30 * 86_400_000;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(agent_relationships))
        .routes(routes!(relationship_graph))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ModelCall {
    pub provider: String,
    pub model: String,
    pub request_count: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ProviderCall {
    pub provider: String,
    pub request_count: i64,
}

/// What one agent called in the last 30 days.
#[derive(Debug, Serialize, ToSchema)]
pub struct Relationships {
    pub agent_id: String,
    pub models: Vec<ModelCall>,
    pub providers: Vec<ProviderCall>,
    /// Tools the agent called (reported by the MCP gateway; empty until then).
    pub tools: Vec<String>,
    /// Agents the agent called (empty until reported).
    pub agents: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Node {
    /// The agent's id, `model:<model name>` or `provider:<provider>`.
    pub id: String,
    pub name: String,
    /// `agent`, `model` or `provider`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Agents only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub framework: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Edge {
    pub source: String,
    pub target: String,
    /// `calls_model` (agent → model) or `served_by` (model → provider).
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub request_count: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
}

#[utoipa::path(get, path = "/agents/{agent_id}/relationships", tag = "security",
    params(("agent_id" = String, Path)), security(("bearer" = ["registry:read"])),
    responses((status = 200, description = "The models and providers the agent called in the last 30 days", body = Envelope<Relationships>)))]
async fn agent_relationships(
    caller: Authorized<require::RegistryRead>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult<Response> {
    let agent = get_agent_for(&state, &caller, &agent_id).await?;
    let since = state.clock.now().as_millis() - WINDOW_MS;
    let calls = store::calls(state.db.pool(), &caller.tenant_id, Some(&agent.id), since).await?;
    let mut providers: BTreeMap<String, i64> = BTreeMap::new();
    for call in &calls {
        *providers.entry(call.provider.clone()).or_default() += call.requests;
    }
    let mut providers: Vec<ProviderCall> = providers
        .into_iter()
        .map(|(provider, request_count)| ProviderCall {
            provider,
            request_count,
        })
        .collect();
    providers.sort_by(|a, b| {
        b.request_count
            .cmp(&a.request_count)
            .then(a.provider.cmp(&b.provider))
    });
    Ok(envelope::ok(Relationships {
        agent_id: agent.id,
        models: calls
            .into_iter()
            .map(|c| ModelCall {
                provider: c.provider,
                model: c.model,
                request_count: c.requests,
            })
            .collect(),
        providers,
        tools: Vec::new(),
        agents: Vec::new(),
    }))
}

#[utoipa::path(get, path = "/relationships/graph", tag = "security",
    security(("bearer" = ["registry:read"])),
    responses((status = 200, description = "Every live agent, the models and providers they called in the last 30 days, and edges weighted by requests", body = Envelope<Graph>)))]
async fn relationship_graph(
    caller: Authorized<require::RegistryRead>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    let now = state.clock.now().as_millis();
    let pool = state.db.pool();
    let agents = store::agents(pool, &caller.tenant_id, now).await?;
    let calls = store::calls(pool, &caller.tenant_id, None, now - WINDOW_MS).await?;
    Ok(envelope::ok(graph(agents, &calls)))
}

fn graph(agents: Vec<store::AgentNode>, calls: &[store::Call]) -> Graph {
    let live: std::collections::HashSet<&str> = agents.iter().map(|a| a.id.as_str()).collect();
    let mut edges = Vec::new();
    // model → (provider → requests)
    let mut served: BTreeMap<(String, String), i64> = BTreeMap::new();
    for call in calls.iter().filter(|c| live.contains(c.agent_id.as_str())) {
        edges.push(Edge {
            source: call.agent_id.clone(),
            target: format!("model:{}", call.model),
            kind: "calls_model",
            request_count: call.requests,
        });
        *served
            .entry((call.model.clone(), call.provider.clone()))
            .or_default() += call.requests;
    }
    let mut nodes: Vec<Node> = agents
        .into_iter()
        .map(|agent| Node {
            id: agent.id,
            name: agent.name,
            kind: "agent",
            status: Some(agent.status),
            blocked: Some(agent.blocked),
            framework: agent.framework,
        })
        .collect();
    let mut models: Vec<&String> = served.keys().map(|(model, _)| model).collect();
    models.dedup();
    let mut providers: Vec<&String> = served.keys().map(|(_, provider)| provider).collect();
    providers.sort();
    providers.dedup();
    let plain = |id: String, name: &str, kind| Node {
        id,
        name: name.to_owned(),
        kind,
        status: None,
        blocked: None,
        framework: None,
    };
    nodes.extend(
        models
            .iter()
            .map(|m| plain(format!("model:{m}"), m, "model")),
    );
    nodes.extend(
        providers
            .iter()
            .map(|p| plain(format!("provider:{p}"), p, "provider")),
    );
    edges.extend(served.iter().map(|((model, provider), requests)| Edge {
        source: format!("model:{model}"),
        target: format!("provider:{provider}"),
        kind: "served_by",
        request_count: *requests,
    }));
    Graph { nodes, edges }
}
