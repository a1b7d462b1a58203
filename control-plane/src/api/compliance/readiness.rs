//! EU AI Act readiness (spec 2.20, 4.9): seven components scored from the tenant's real
//! state, each with the evidence it was scored on and what would raise it.
//!
//! | component | max | full marks when |
//! |---|---|---|
//! | `agent_registry` | 10 | every live agent has an owner or a team (accountability) |
//! | `risk_classification` | 20 | every live agent is classified |
//! | `governance_policies` | 15 | every live agent is covered by an enabled policy |
//! | `human_oversight` | 15 | every high-risk agent (every agent, when none is high-risk) is covered by a `require_approval` or `require_human_review` policy (Art. 14) |
//! | `audit_trail` | 10 | the tenant's events form a verifiable hash chain, kept without expiry (Art. 12, 19) |
//! | `fria_completion` | 20 | every high-risk or unclassified agent has a submitted FRIA (Art. 27) |
//! | `incident_readiness` | 10 | a channel hears `incident.created` (5) and no incident is past its Art. 73 deadline (5) |
//!
//! A share scores `max × share`, rounded down. `rating` is `ready` from 85, `partially_ready`
//! from 50, else `not_ready`.

use serde::Serialize;
use serde_json::{json, Value};
use utoipa::ToSchema;
use warden_shared::timestamp::Timestamp;

use super::store::{self, AgentGroup};
use crate::api::oversight::covers;
use crate::auth::Caller;
use crate::error::ApiResult;
use crate::state::AppState;

#[derive(Debug, Serialize, ToSchema)]
pub struct Readiness {
    pub total_score: i64,
    pub max_score: i64,
    /// `ready`, `partially_ready` or `not_ready`.
    pub rating: &'static str,
    pub components: Vec<Component>,
    /// Every component's recommendations, the lowest-scoring components' first.
    pub recommendations: Vec<String>,
    #[schema(value_type = String, format = DateTime)]
    pub assessed_at: Timestamp,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = ReadinessComponent)]
pub struct Component {
    pub name: &'static str,
    pub score: i64,
    pub max_score: i64,
    /// `complete`, `partial` or `missing`.
    pub status: &'static str,
    /// What the score was computed from.
    #[schema(value_type = Object)]
    pub evidence: Value,
    pub recommendations: Vec<String>,
}

/// What the components are computed from.
struct State {
    /// The live agents, grouped by what the components look at.
    groups: Vec<AgentGroup>,
    policy_scopes: Vec<String>,
    human_scopes: Vec<String>,
    chained: bool,
    incident_channels: i64,
    overdue_incidents: i64,
}

pub async fn assess(state: &AppState, caller: &Caller) -> ApiResult<Readiness> {
    let tenant = caller.tenant_id.as_str();
    let pool = state.db.pool();
    let now = state.clock.now();
    let policies = store::enabled_policy_scopes(pool, tenant).await?;
    let channels = store::enabled_channel_events(pool, tenant).await?;
    let facts = State {
        groups: store::agent_groups(pool, tenant).await?,
        human_scopes: policies
            .iter()
            .filter(|(_, kind)| kind == "require_approval" || kind == "require_human_review")
            .map(|(scope, _)| scope.clone())
            .collect(),
        policy_scopes: policies.into_iter().map(|(scope, _)| scope).collect(),
        chained: store::audit_head_count(pool, tenant).await? > 0,
        incident_channels: channels
            .iter()
            .filter(|events| {
                serde_json::from_str::<Vec<String>>(events)
                    .is_ok_and(|events| events.iter().any(|e| e == "incident.created"))
            })
            .count() as i64,
        overdue_incidents: crate::api::incidents::overdue_count(pool, tenant, now).await?,
    };
    let components = vec![
        agent_registry(&facts),
        risk_classification(&facts),
        governance_policies(&facts),
        human_oversight(&facts),
        audit_trail(&facts),
        fria_completion(&facts),
        incident_readiness(&facts),
    ];
    let total_score = components.iter().map(|c| c.score).sum();
    let max_score = components.iter().map(|c| c.max_score).sum();
    let mut ordered: Vec<&Component> = components.iter().collect();
    ordered.sort_by_key(|c| (c.score * 100) / c.max_score.max(1));
    let recommendations = ordered
        .iter()
        .flat_map(|c| c.recommendations.iter().cloned())
        .collect();
    Ok(Readiness {
        total_score,
        max_score,
        rating: match total_score {
            85.. => "ready",
            50.. => "partially_ready",
            _ => "not_ready",
        },
        components,
        recommendations,
        assessed_at: now,
    })
}

fn component(
    name: &'static str,
    max_score: i64,
    (part, whole): (usize, usize),
    evidence: Value,
    recommendation: Option<String>,
) -> Component {
    let score = if whole == 0 {
        0
    } else {
        max_score * part as i64 / whole as i64
    };
    Component {
        name,
        score,
        max_score,
        status: status(score, max_score),
        evidence,
        recommendations: if score < max_score {
            recommendation.into_iter().collect()
        } else {
            Vec::new()
        },
    }
}

fn status(score: i64, max: i64) -> &'static str {
    if score >= max {
        "complete"
    } else if score == 0 {
        "missing"
    } else {
        "partial"
    }
}

/// How many agents the groups that pass `test` hold.
fn count(groups: &[&AgentGroup], test: impl Fn(&AgentGroup) -> bool) -> usize {
    groups.iter().filter(|g| test(g)).map(|g| g.agents).sum()
}

impl State {
    fn all(&self) -> Vec<&AgentGroup> {
        self.groups.iter().collect()
    }
}

fn agent_registry(facts: &State) -> Component {
    let all = facts.all();
    let accountable = count(&all, |g| g.facts.team_id.is_some() || g.owned);
    let total = count(&all, |_| true);
    component(
        "agent_registry",
        10,
        (accountable, total),
        json!({ "live_agents": total, "with_owner_or_team": accountable }),
        Some(if total == 0 {
            "Register the AI agents you deploy (POST /agents) so that each is inventoried."
                .to_owned()
        } else {
            format!(
                "Give {} agent(s) an owner (POST /agents/{{id}}/owners) or a team.",
                total - accountable
            )
        }),
    )
}

fn risk_classification(facts: &State) -> Component {
    let all = facts.all();
    let classified = count(&all, |g| g.facts.risk_level.is_some());
    let total = count(&all, |_| true);
    component(
        "risk_classification",
        20,
        (classified, total),
        json!({ "live_agents": total, "classified": classified }),
        Some(format!(
            "Classify {} agent(s) under the EU AI Act (POST /agents/{{id}}/risk-classification; GET /agents/{{id}}/risk-suggestion proposes a tier).",
            total - classified
        )),
    )
}

fn governance_policies(facts: &State) -> Component {
    let all = facts.all();
    let covered = count(&all, |g| {
        facts
            .policy_scopes
            .iter()
            .any(|scope| covers(scope, &g.facts))
    });
    let total = count(&all, |_| true);
    component(
        "governance_policies",
        15,
        (covered, total),
        json!({ "enabled_policies": facts.policy_scopes.len(), "agents_covered": covered, "live_agents": total }),
        Some(format!(
            "Cover {} agent(s) with an enabled policy (GET /policy-templates has starting points).",
            total - covered
        )),
    )
}

fn is_high(group: &AgentGroup) -> bool {
    matches!(
        group.facts.risk_level.as_deref(),
        Some("high" | "prohibited")
    )
}

fn human_oversight(facts: &State) -> Component {
    let high: Vec<&AgentGroup> = facts.groups.iter().filter(|g| is_high(g)).collect();
    let any_high = !high.is_empty();
    let considered = if any_high { high } else { facts.all() };
    let covered = count(&considered, |g| {
        facts
            .human_scopes
            .iter()
            .any(|scope| covers(scope, &g.facts))
    });
    let total = count(&considered, |_| true);
    component(
        "human_oversight",
        15,
        (covered, total),
        json!({
            "agents_considered": total,
            "considered": if any_high { "high_risk_agents" } else { "all_agents" },
            "with_human_oversight_policy": covered,
        }),
        Some(format!(
            "Put {} agent(s) under human oversight with a require_approval or require_human_review policy (Art. 14).",
            total - covered
        )),
    )
}

fn audit_trail(facts: &State) -> Component {
    component(
        "audit_trail",
        10,
        (usize::from(facts.chained), 1),
        json!({
            "hash_chained": facts.chained,
            "retention": "every event is kept; none expires",
            "verify": "GET /audit-trail/verify",
        }),
        Some("Record activity: the audit trail starts with the first change.".to_owned()),
    )
}

fn fria_completion(facts: &State) -> Component {
    let needing: Vec<&AgentGroup> = facts
        .groups
        .iter()
        .filter(|g| g.facts.risk_level.is_none() || is_high(g))
        .collect();
    let done = count(&needing, |g| g.submitted_fria);
    let total = count(&needing, |_| true);
    let (part, whole) = if total == 0 { (1, 1) } else { (done, total) };
    component(
        "fria_completion",
        20,
        (part, whole),
        json!({ "high_risk_or_unclassified_agents": total, "with_submitted_fria": done }),
        Some(format!(
            "Submit a fundamental rights impact assessment (POST /agents/{{id}}/fria, then /fria/{{id}}/submit) for {} high-risk or unclassified agent(s) (Art. 27).",
            total - done
        )),
    )
}

fn incident_readiness(facts: &State) -> Component {
    let channel = if facts.incident_channels > 0 { 5 } else { 0 };
    let deadlines = if facts.overdue_incidents == 0 { 5 } else { 0 };
    let score = channel + deadlines;
    let mut recommendations = Vec::new();
    if channel == 0 {
        recommendations.push(
            "Create a notification channel for `incident.created` so that incidents reach the people who report them (Art. 73).".to_owned(),
        );
    }
    if deadlines == 0 {
        recommendations.push(format!(
            "{} incident(s) are past their Art. 73 reporting deadline: notify the authority and record it (PATCH /incidents/{{id}}).",
            facts.overdue_incidents
        ));
    }
    Component {
        name: "incident_readiness",
        score,
        max_score: 10,
        status: status(score, 10),
        evidence: json!({
            "channels_for_incident_created": facts.incident_channels,
            "incidents_past_deadline": facts.overdue_incidents,
        }),
        recommendations,
    }
}
