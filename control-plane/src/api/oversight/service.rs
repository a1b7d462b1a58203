//! Oversight's rules: the window, and the scorecards of one agent or of every agent of
//! the tenant with their aggregate.

use super::score::{covers, scorecard, ApprovalCounts, Scorecard};
use super::store::{self, Scope};
use super::{Summary, WindowQuery};
use crate::api::range::{parse_end, parse_start};
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use warden_shared::ids::{is_valid_id, IdKind};
use warden_shared::timestamp::Timestamp;

const DAY_MS: i64 = 86_400_000;
/// The window when none is given.
const DEFAULT_DAYS: i64 = 30;
/// The longest window.
const MAX_DAYS: i64 = 180;

/// `[start, end)` from the query: by default the last 30 days; at most 180 days.
pub fn window(query: &WindowQuery, now: Timestamp) -> ApiResult<(i64, i64)> {
    let end = match query.end.as_deref() {
        Some(text) => parse_end("end", text)?,
        // Exclusive: what happened this very millisecond is in.
        None => now.as_millis() + 1,
    };
    let start = match query.start.as_deref() {
        Some(text) => parse_start("start", text)?,
        None => end - DEFAULT_DAYS * DAY_MS,
    };
    if end <= start {
        return Err(ApiError::validation("end", "end: must be after start"));
    }
    if end - start > MAX_DAYS * DAY_MS {
        return Err(ApiError::validation(
            "start",
            format!("start: the window may span at most {MAX_DAYS} days"),
        ));
    }
    Ok((start, end))
}

/// The scorecards of `agent_id`, or of every live agent of the tenant.
async fn scorecards(
    state: &AppState,
    caller: &Caller,
    agent_id: Option<&str>,
    (start, end): (i64, i64),
) -> ApiResult<Vec<Scorecard>> {
    let scope = Scope {
        tenant_id: &caller.tenant_id,
        agent_id,
        start,
        end,
    };
    let pool = state.db.pool();
    let now = state.clock.now().as_millis();
    let agents = store::agents(pool, scope).await?;
    let mut approvals = store::approvals(pool, scope, now).await?;
    let mut counts = store::counts(pool, scope).await?;
    let scopes = store::human_policy_scopes(pool, &caller.tenant_id).await?;
    Ok(agents
        .iter()
        .map(|agent| {
            let policies = scopes.iter().filter(|scope| covers(scope, agent)).count() as i64;
            scorecard(
                agent,
                &approvals.remove(&agent.id).unwrap_or_default(),
                &counts.remove(&agent.id).unwrap_or_default(),
                policies,
                now,
            )
        })
        .collect())
}

pub async fn agent_scorecard(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
    query: &WindowQuery,
) -> ApiResult<Scorecard> {
    let window = window(query, state.clock.now())?;
    if !is_valid_id(IdKind::Agent, agent_id) {
        return Err(ApiError::not_found("agent"));
    }
    scorecards(state, caller, Some(agent_id), window)
        .await?
        .pop()
        .ok_or_else(|| ApiError::not_found("agent"))
}

pub async fn summary(state: &AppState, caller: &Caller, query: &WindowQuery) -> ApiResult<Summary> {
    let (start, end) = window(query, state.clock.now())?;
    let cards = scorecards(state, caller, None, (start, end)).await?;
    let mut summary = Summary {
        start: Timestamp::from_millis(start),
        end: Timestamp::from_millis(end),
        agents_evaluated: cards.len() as i64,
        agents_with_human_oversight: cards
            .iter()
            .filter(|c| c.human_oversight_policies > 0)
            .count() as i64,
        average_score: 0.0,
        policy_evaluations: 0,
        policy_failures: 0,
        human_reviews: 0,
        approvals: ApprovalCounts::default(),
        blocks: 0,
        quarantines: 0,
        agents_below_50: Vec::new(),
    };
    for card in &cards {
        summary.policy_evaluations += card.policy_evaluations;
        summary.policy_failures += card.policy_failures;
        summary.human_reviews += card.human_reviews;
        summary.approvals.requested += card.approvals.requested;
        summary.approvals.approved += card.approvals.approved;
        summary.approvals.denied += card.approvals.denied;
        summary.approvals.expired += card.approvals.expired;
        summary.approvals.pending += card.approvals.pending;
        summary.blocks += card.blocks;
        summary.quarantines += card.quarantines;
        if card.score < 50 {
            summary.agents_below_50.push(card.agent_id.clone());
        }
    }
    if !cards.is_empty() {
        let total: i64 = cards.iter().map(|c| c.score).sum();
        summary.average_score = (total as f64 / cards.len() as f64 * 10.0).round() / 10.0;
    }
    Ok(summary)
}
