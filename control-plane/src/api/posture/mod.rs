//! The security posture (spec 2.20, 4.3): six components scored from the tenant's live
//! agents as they are now, each with a `detail` that says what to fix.
//!
//! Each component's score is its maximum times the share of agents in good standing,
//! rounded: **Agent Ownership** (20; agents with at least one owner), **Agent Expiry**
//! (15; agents with an expiry still ahead), **Access Reviews** (15; agents with a review
//! schedule whose date has not passed), **Quarantine Status** (15; agents not
//! quarantined), **Kill Switch Status** (15; agents not blocked), **Risk
//! Classification** (20; agents classified). A tenant without agents scores every
//! maximum. `admin` scope.

mod store;

use axum::extract::State;
use axum::response::Response;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;

use store::AgentPosture;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(security_posture))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Posture {
    pub score: i64,
    pub max_score: i64,
    pub components: Vec<Component>,
    #[schema(value_type = String, format = DateTime)]
    pub assessed_at: Timestamp,
}

/// One of the posture's six components (named apart from the readiness components in
/// the OpenAPI document).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = PostureComponent)]
pub struct Component {
    pub name: &'static str,
    pub max_score: i64,
    pub score: i64,
    /// What stands, and what to fix (the first few agents named).
    pub detail: String,
}

#[utoipa::path(get, path = "/security/posture", tag = "security",
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "The six components with their scores and what to fix", body = Envelope<Posture>)))]
async fn security_posture(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    let agents = store::agents(state.db.pool(), &caller.tenant_id).await?;
    let now = state.clock.now();
    Ok(envelope::ok(posture(&agents, now)))
}

/// The posture of `agents` at `now`: a pure function of their facts.
pub fn posture(agents: &[AgentPosture], now: Timestamp) -> Posture {
    let at = now.as_millis();
    let components = vec![
        component(
            "Agent Ownership",
            20,
            agents,
            |a| a.has_owner,
            "have no owner",
        ),
        component(
            "Agent Expiry",
            15,
            agents,
            |a| a.expires_at.is_some_and(|e| e > at),
            "have no expiry set, or it has passed",
        ),
        component(
            "Access Reviews",
            15,
            agents,
            |a| a.review_date.is_some_and(|d| d > at),
            "have no review schedule, or their review is overdue",
        ),
        component(
            "Quarantine Status",
            15,
            agents,
            |a| !a.quarantined,
            "are quarantined",
        ),
        component(
            "Kill Switch Status",
            15,
            agents,
            |a| !a.blocked,
            "are blocked by the kill switch",
        ),
        component(
            "Risk Classification",
            20,
            agents,
            |a| a.classified,
            "are not risk-classified",
        ),
    ];
    Posture {
        score: components.iter().map(|c| c.score).sum(),
        max_score: 100,
        components,
        assessed_at: now,
    }
}

/// How many names a detail lists before it says how many more.
const NAMED: usize = 5;

fn component(
    name: &'static str,
    max_score: i64,
    agents: &[AgentPosture],
    good: impl Fn(&AgentPosture) -> bool,
    problem: &str,
) -> Component {
    let total = agents.len() as i64;
    let bad: Vec<&str> = agents
        .iter()
        .filter(|a| !good(a))
        .map(|a| a.id.as_str())
        .collect();
    let fine = total - bad.len() as i64;
    let score = if total == 0 {
        max_score
    } else {
        (max_score * fine + total / 2) / total
    };
    let detail = if total == 0 {
        "no agents registered".to_owned()
    } else if bad.is_empty() {
        format!("all {total} agents are in good standing")
    } else {
        let mut named = bad
            .iter()
            .take(NAMED)
            .copied()
            .collect::<Vec<_>>()
            .join(", ");
        if bad.len() > NAMED {
            named.push_str(&format!(" and {} more", bad.len() - NAMED));
        }
        format!("{} of {total} agents {problem}: {named}", bad.len())
    };
    Component {
        name,
        max_score,
        score,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(id: &str) -> AgentPosture {
        AgentPosture {
            id: id.to_owned(),
            has_owner: true,
            expires_at: Some(2_000),
            review_date: Some(2_000),
            quarantined: false,
            blocked: false,
            classified: true,
        }
    }

    #[test]
    fn each_component_scores_the_share_in_good_standing() {
        let now = Timestamp::from_millis(1_000);
        let all_good = posture(&[agent("a"), agent("b")], now);
        assert_eq!(all_good.score, 100);
        let mut orphan = agent("c");
        orphan.has_owner = false;
        orphan.expires_at = Some(500);
        orphan.blocked = true;
        let mixed = posture(&[agent("a"), agent("b"), orphan], now);
        let by_name = |name: &str| mixed.components.iter().find(|c| c.name == name).unwrap();
        assert_eq!(by_name("Agent Ownership").score, 13, "20 × 2/3");
        assert_eq!(by_name("Agent Expiry").score, 10, "15 × 2/3");
        assert_eq!(by_name("Kill Switch Status").score, 10);
        assert_eq!(by_name("Risk Classification").score, 20);
        assert!(by_name("Agent Ownership")
            .detail
            .contains("1 of 3 agents have no owner: c"));
        assert_eq!(mixed.score, 13 + 10 + 15 + 15 + 10 + 20);
        assert_eq!(posture(&[], now).score, 100);
    }
}
