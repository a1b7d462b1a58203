//! The rules of the registry: plan agent limits, team resolution, soft delete, audit.

use crate::api::provider_names;
use serde_json::json;
use warden_shared::ids::{is_valid_id, new_id, IdKind};
use warden_shared::registry::{AgentStatus, Environment};
use warden_shared::timestamp::Timestamp;

use super::input::{LifecycleInput, Reason};
use super::store::{self, AgentRow, EnforcementFlag};
use super::{Agent, AgentFilter, CreateAgentInput, UpdateAgentInput};
use crate::api::envelope::Page;
use crate::api::risk_level::RiskLevel;
use crate::api::teams::find_or_create_team_id;
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, ChangeKind, Proxies};
use crate::db::WriteTx;
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::state::AppState;

pub async fn list_agents(
    state: &AppState,
    caller: &Caller,
    filter: &AgentFilter,
    page: Page,
) -> ApiResult<(Vec<Agent>, i64)> {
    let filter = store::Filter {
        status: filter.status.map(AgentStatus::as_str),
        framework: filter.framework.as_deref(),
        team: filter.team.as_deref(),
        environment: filter.environment.map(Environment::as_str),
        risk_level: filter.risk_level.map(RiskLevel::as_str),
        name_like: filter
            .search
            .as_ref()
            .map(|text| name_pattern(text.as_str())),
        only: store::Only::All,
    };
    let now = state.clock.now().as_millis();
    let agents = store::list(state.db.pool(), &caller.tenant_id, &filter, page, now).await?;
    let total = store::count(state.db.pool(), &caller.tenant_id, &filter, now).await?;
    Ok((agents, total))
}

/// The `LIKE` pattern of names containing `text`, case-insensitively: `%`, `_` and the
/// escape character itself match only themselves.
fn name_pattern(text: &str) -> String {
    let mut pattern = String::from("%");
    for c in text.to_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

pub async fn get_agent(state: &AppState, caller: &Caller, agent_id: &str) -> ApiResult<Agent> {
    if !is_valid_id(IdKind::Agent, agent_id) {
        return Err(ApiError::not_found("agent"));
    }
    store::get(
        state.db.pool(),
        &caller.tenant_id,
        agent_id,
        state.clock.now().as_millis(),
    )
    .await?
    .ok_or_else(|| ApiError::not_found("agent"))
}

/// The live agents `owner_id` owns (agent owners, spec 2.4), in one query.
pub async fn agents_owned_by(
    state: &AppState,
    caller: &Caller,
    owner_id: &str,
) -> ApiResult<Vec<Agent>> {
    Ok(store::owned_by(
        state.db.pool(),
        &caller.tenant_id,
        owner_id,
        state.clock.now().as_millis(),
    )
    .await?)
}

pub async fn register_agent(
    state: &AppState,
    caller: &Caller,
    input: CreateAgentInput,
) -> ApiResult<Agent> {
    let mut tx = state.db.begin_write().await?;
    let agent = register_agent_in(state, &mut tx, caller, input).await?;
    tx.commit().await?;
    Ok(agent)
}

/// Registers an agent inside `tx` (a proxy key creates the agent behind it this way).
pub async fn register_agent_in(
    state: &AppState,
    tx: &mut WriteTx,
    caller: &Caller,
    input: CreateAgentInput,
) -> ApiResult<Agent> {
    provider_names::require_known(&state.providers, "model_provider", &input.model_provider)?;
    let now = state.clock.now();
    if !store::reserve_agent_slot(&mut **tx, &caller.tenant_id).await? {
        return Err(ApiError::new(
            ErrorCode::AgentLimitReached,
            "the plan's active agent limit is reached; delete an agent or upgrade the plan",
        ));
    }
    let team_id = match &input.team {
        Some(name) => Some(find_or_create_team_id(state, tx, caller, name.as_str()).await?),
        None => None,
    };
    let id = new_id(IdKind::Agent, now.as_millis());
    let row = AgentRow {
        name: input.name.as_str().to_owned(),
        description: input.description.map(|d| d.into_inner()),
        framework: input.framework.map(|f| f.into_inner()),
        model_provider: input.model_provider.map(|p| p.as_str().to_owned()),
        model_name: input.model_name.map(|m| m.into_inner()),
        environment: input
            .environment
            .unwrap_or(Environment::Production)
            .as_str()
            .to_owned(),
        team_id,
        tags: input.tags.unwrap_or_default().to_json(),
    };
    store::insert(&mut **tx, &caller.tenant_id, &id, &row, now.as_millis()).await?;
    changes::record(
        tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "agent.registered",
            target_type: "agent",
            target_id: &id,
            details: json!({
                "name": row.name,
                "environment": row.environment,
                "team": input.team.as_ref().map(|t| t.as_str()),
            }),
        },
        Proxies::Unaffected,
    )
    .await?;
    store::get(&mut **tx, &caller.tenant_id, &id, now.as_millis())
        .await?
        .ok_or_else(|| ApiError::internal("agent vanished inside its own transaction"))
}

pub async fn update_agent(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
    input: UpdateAgentInput,
) -> ApiResult<Agent> {
    provider_names::require_known(
        &state.providers,
        "model_provider",
        input.model_provider.iter().flatten(),
    )?;
    let current = get_agent(state, caller, agent_id).await?;
    if matches!(input.name, Some(None)) {
        return Err(ApiError::validation("name", "name: must not be null"));
    }
    if matches!(input.environment, Some(None)) {
        return Err(ApiError::validation(
            "environment",
            "environment: must not be null",
        ));
    }
    let mut changed: Vec<&str> = Vec::new();
    let mut note = |field: &'static str, present: bool| {
        if present {
            changed.push(field);
        }
    };
    note("name", input.name.is_some());
    note("description", input.description.is_some());
    note("framework", input.framework.is_some());
    note("model_provider", input.model_provider.is_some());
    note("model_name", input.model_name.is_some());
    note("environment", input.environment.is_some());
    note("team", input.team.is_some());
    note("tags", input.tags.is_some());
    if changed.is_empty() {
        return Ok(current);
    }
    let now = state.clock.now();
    let current_environment = current.environment.clone();
    let current_name = current.name.clone();
    let mut tx = state.db.begin_write().await?;
    let team_id = match &input.team {
        None => current.team_id.clone(),
        Some(None) => None,
        Some(Some(name)) => {
            Some(find_or_create_team_id(state, &mut tx, caller, name.as_str()).await?)
        }
    };
    let row = AgentRow {
        name: pick(input.name, Some(current.name)).unwrap_or_default(),
        description: pick(input.description, current.description),
        framework: pick(input.framework, current.framework),
        model_provider: match input.model_provider {
            None => current.model_provider,
            Some(value) => value.map(|p| p.as_str().to_owned()),
        },
        model_name: pick(input.model_name, current.model_name),
        environment: match input.environment {
            Some(Some(environment)) => environment.as_str().to_owned(),
            _ => current.environment,
        },
        team_id,
        tags: match input.tags {
            None => current.tags.to_string(),
            Some(tags) => tags.unwrap_or_default().to_json(),
        },
    };
    // The proxies scope policies and budgets by the agent's team and environment, and
    // name the agent in traces.
    let proxies = if row.team_id != current.team_id
        || row.environment != current_environment
        || row.name != current_name
    {
        Proxies::Reload(ChangeKind::Agent)
    } else {
        Proxies::Unaffected
    };
    if !store::update(&mut *tx, &caller.tenant_id, agent_id, &row, now.as_millis()).await? {
        return Err(ApiError::not_found("agent"));
    }
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "agent.updated",
            target_type: "agent",
            target_id: agent_id,
            details: json!({ "changed": changed }),
        },
        proxies,
    )
    .await?;
    let agent = store::get(&mut *tx, &caller.tenant_id, agent_id, now.as_millis())
        .await?
        .ok_or_else(|| ApiError::not_found("agent"))?;
    tx.commit().await?;
    Ok(agent)
}

pub async fn delete_agent(state: &AppState, caller: &Caller, agent_id: &str) -> ApiResult<()> {
    let agent = get_agent(state, caller, agent_id).await?;
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    if !store::soft_delete(&mut tx, &caller.tenant_id, agent_id, now.as_millis()).await? {
        return Err(ApiError::not_found("agent"));
    }
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "agent.deleted",
            target_type: "agent",
            target_id: agent_id,
            details: json!({ "name": agent.name }),
        },
        Proxies::Reload(ChangeKind::Agent),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The new value of an optional text field: absent keeps `current`, null clears it.
fn pick<const MIN: usize, const MAX: usize>(
    update: Option<Option<crate::validate::Text<MIN, MAX>>>,
    current: Option<String>,
) -> Option<String> {
    match update {
        None => current,
        Some(value) => value.map(|text| text.into_inner()),
    }
}

/// The agents of a security list (quarantined, expired, due for review), newest first.
pub async fn list_security_subset(
    state: &AppState,
    caller: &Caller,
    only: store::Only,
    page: Page,
) -> ApiResult<(Vec<Agent>, i64)> {
    let filter = store::Filter {
        only,
        ..store::Filter::default()
    };
    let now = state.clock.now().as_millis();
    let agents = store::list(state.db.pool(), &caller.tenant_id, &filter, page, now).await?;
    let total = store::count(state.db.pool(), &caller.tenant_id, &filter, now).await?;
    Ok((agents, total))
}

fn event_type(flag: EnforcementFlag, on: bool) -> &'static str {
    match (flag, on) {
        (EnforcementFlag::Blocked, true) => "agent.blocked",
        (EnforcementFlag::Blocked, false) => "agent.unblocked",
        (EnforcementFlag::Quarantined, true) => "agent.quarantined",
        (EnforcementFlag::Quarantined, false) => "agent.quarantine_released",
    }
}

/// Sets `flag` on the agent, audits it and tells the proxies, in one transaction.
pub async fn set_flag(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
    flag: EnforcementFlag,
    on: bool,
    reason: Option<&Reason>,
) -> ApiResult<()> {
    if !is_valid_id(IdKind::Agent, agent_id) {
        return Err(ApiError::not_found("agent"));
    }
    let reason = reason.map(Reason::as_str);
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let (tenant_id, at) = (caller.tenant_id.as_str(), now.as_millis());
    if !store::set_flag(&mut tx, tenant_id, agent_id, flag, on, reason, at).await? {
        return Err(ApiError::not_found("agent"));
    }
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: event_type(flag, on),
            target_type: "agent",
            target_id: agent_id,
            details: json!({ "reason": reason }),
        },
        Proxies::Reload(ChangeKind::Agent),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Sets what `input` names of the agent's lifecycle, audited; a changed expiry reaches
/// the proxies.
pub async fn update_lifecycle(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
    input: LifecycleInput,
) -> ApiResult<()> {
    let current = get_agent(state, caller, agent_id).await?;
    let now = state.clock.now();
    let expires_at = match &input.expires_at {
        None => current.expires_at.map(Timestamp::as_millis),
        Some(None) => None,
        Some(Some(text)) => {
            let at = Timestamp::parse_rfc3339(text).ok_or_else(|| {
                ApiError::validation("expires_at", "expires_at: expected an RFC 3339 date-time")
            })?;
            // A time already past is ordinary (an inventory synced after the fact, or
            // expiring an agent now): the agent is expired from the answer on.
            Some(at.as_millis())
        }
    };
    let (review_frequency, review_date) = match input.review_frequency {
        None => (
            current.review_frequency.clone(),
            current.review_date.map(Timestamp::as_millis),
        ),
        Some(None) => (None, None),
        Some(Some(frequency)) => (
            Some(frequency.as_str().to_owned()),
            Some(now.as_millis() + frequency.period_ms()),
        ),
    };
    let sponsor_id = match &input.sponsor_id {
        None => current.sponsor_id.clone(),
        Some(sponsor) => sponsor.as_ref().map(|s| s.as_str().to_owned()),
    };
    let lifecycle = store::Lifecycle {
        expires_at,
        review_frequency: review_frequency.as_deref(),
        review_date,
        sponsor_id: sponsor_id.as_deref(),
    };
    let expiry_changed = expires_at != current.expires_at.map(Timestamp::as_millis);
    let mut tx = state.db.begin_write().await?;
    if !store::set_lifecycle(
        &mut tx,
        &caller.tenant_id,
        agent_id,
        &lifecycle,
        now.as_millis(),
    )
    .await?
    {
        return Err(ApiError::not_found("agent"));
    }
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "agent.lifecycle_updated",
            target_type: "agent",
            target_id: agent_id,
            details: json!({
                "expires_at": expires_at.map(Timestamp::from_millis),
                "expired": expires_at.is_some_and(|at| at <= now.as_millis()),
                "review_frequency": lifecycle.review_frequency,
                "review_date": review_date.map(Timestamp::from_millis),
                "sponsor_id": lifecycle.sponsor_id,
            }),
        },
        if expiry_changed {
            Proxies::Reload(ChangeKind::Agent)
        } else {
            Proxies::Unaffected
        },
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
