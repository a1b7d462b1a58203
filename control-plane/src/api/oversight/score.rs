//! The oversight scorecard of one agent, from the facts of a window: a pure function, so
//! the formula is tested on its own.
//!
//! **Score** (0–100), the sum of four parts:
//! - *coverage*, 40: at least one enabled `require_approval` or `require_human_review`
//!   policy covers the agent (its scope is `global`, the agent, its team or its
//!   environment); 0 otherwise.
//! - *attendance*, 30: 30 × the share of the window's approval requests a person decided
//!   (approved or denied) rather than let expire or leave pending; 30 when none was
//!   requested (nothing went unattended).
//! - *responsiveness*, 15: by the median time from request to decision: at most 1 hour
//!   15, at most 8 hours 10, at most 24 hours 5, longer 0; 15 when none was requested, 0
//!   when requests were made and none decided.
//! - *review*, 15: the agent has a review schedule (`review_frequency`, set through
//!   `PATCH /agents/{id}/lifecycle`) and its `review_date` has not passed; 0 otherwise.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

use warden_shared::policy::Scope;

use super::store::{AgentFacts, ApprovalFacts, Counts};

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 86_400_000;

/// Approvals of the window by outcome, as of now.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct ApprovalCounts {
    pub requested: i64,
    pub approved: i64,
    pub denied: i64,
    pub expired: i64,
    pub pending: i64,
}

/// The score and its parts.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ScoreParts {
    pub coverage: i64,
    pub attendance: i64,
    pub responsiveness: i64,
    pub review: i64,
}

/// One agent's oversight in a window.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Scorecard {
    pub agent_id: String,
    pub agent_name: String,
    pub risk_level: Option<String>,
    /// Requests the policies evaluated (forwarded, refused or held).
    pub policy_evaluations: i64,
    /// Of those, requests a policy refused or held.
    pub policy_failures: i64,
    /// `policy_failures / policy_evaluations` (0 with no evaluations).
    pub fail_rate: f64,
    /// Forwarded requests flagged for human review (`require_human_review`).
    pub human_reviews: i64,
    pub approvals: ApprovalCounts,
    /// Decisions per reviewer.
    pub decided_by: BTreeMap<String, i64>,
    /// Approved share of decided approvals: how often a person let through what a
    /// policy held (0 with none decided).
    pub override_rate: f64,
    /// Expired share of requested approvals: holds nobody attended to.
    pub unattended_rate: f64,
    pub median_decision_seconds: Option<f64>,
    pub average_decision_seconds: Option<f64>,
    pub blocks: i64,
    pub quarantines: i64,
    /// Enabled approval and human-review policies that cover the agent.
    pub human_oversight_policies: i64,
    /// Null when the agent has no review schedule.
    pub review_overdue: Option<bool>,
    pub score: i64,
    pub score_parts: ScoreParts,
}

/// The agent's card from its window's facts; `policies` is how many defer-to-human
/// policies cover it.
pub fn scorecard(
    agent: &AgentFacts,
    approvals: &[ApprovalFacts],
    counts: &Counts,
    policies: i64,
    now: i64,
) -> Scorecard {
    let mut tally = ApprovalCounts::default();
    let mut decided_by: BTreeMap<String, i64> = BTreeMap::new();
    let mut latencies: Vec<i64> = Vec::new();
    for approval in approvals {
        tally.requested += 1;
        match approval.status.as_str() {
            "approved" => tally.approved += 1,
            "denied" => tally.denied += 1,
            "expired" => tally.expired += 1,
            _ => tally.pending += 1,
        }
        if matches!(approval.status.as_str(), "approved" | "denied") {
            let reviewer = approval
                .reviewer_id
                .clone()
                .unwrap_or_else(|| "unknown".to_owned());
            *decided_by.entry(reviewer).or_default() += 1;
            if let Some(resolved) = approval.resolved_at {
                latencies.push((resolved - approval.created_at).max(0));
            }
        }
    }
    latencies.sort_unstable();
    let decided = tally.approved + tally.denied;
    let median = median(&latencies);
    let review_overdue = review_overdue(agent, now);
    let parts = ScoreParts {
        coverage: if policies > 0 { 40 } else { 0 },
        attendance: if tally.requested == 0 {
            30
        } else {
            (30 * decided + tally.requested / 2) / tally.requested
        },
        responsiveness: match (tally.requested, median) {
            (0, _) => 15,
            (_, None) => 0,
            (_, Some(ms)) if ms <= HOUR_MS => 15,
            (_, Some(ms)) if ms <= 8 * HOUR_MS => 10,
            (_, Some(ms)) if ms <= DAY_MS => 5,
            _ => 0,
        },
        review: if review_overdue == Some(false) { 15 } else { 0 },
    };
    Scorecard {
        agent_id: agent.id.clone(),
        agent_name: agent.name.clone(),
        risk_level: agent.risk_level.clone(),
        policy_evaluations: counts.evaluated,
        policy_failures: counts.failed,
        fail_rate: ratio(counts.failed, counts.evaluated),
        human_reviews: counts.human_reviews,
        override_rate: ratio(tally.approved, decided),
        unattended_rate: ratio(tally.expired, tally.requested),
        median_decision_seconds: median.map(seconds),
        average_decision_seconds: (!latencies.is_empty())
            .then(|| seconds(latencies.iter().sum::<i64>()) / latencies.len() as f64),
        approvals: tally,
        decided_by,
        blocks: counts.blocks,
        quarantines: counts.quarantines,
        human_oversight_policies: policies,
        review_overdue,
        score: parts.coverage + parts.attendance + parts.responsiveness + parts.review,
        score_parts: parts,
    }
}

/// Whether `scope` (a policy's, as stored) covers the agent: the evaluator's own rule.
pub fn covers(scope: &str, agent: &AgentFacts) -> bool {
    Scope::parse(scope).is_some_and(|scope| {
        scope.covers_agent(&agent.id, agent.team_id.as_deref(), &agent.environment)
    })
}

/// Whether the agent's scheduled review date has passed; `None` without a schedule.
fn review_overdue(agent: &AgentFacts, now: i64) -> Option<bool> {
    agent.review_date.map(|due| due <= now)
}

fn median(sorted: &[i64]) -> Option<i64> {
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[n / 2]),
        n => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2),
    }
}

fn ratio(part: i64, whole: i64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        // Three places: what a dashboard shows, and stable to compare.
        (part as f64 / whole as f64 * 1000.0).round() / 1000.0
    }
}

fn seconds(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent() -> AgentFacts {
        AgentFacts {
            id: "agt_1".into(),
            name: "bot".into(),
            team_id: Some("team_1".into()),
            environment: "production".into(),
            risk_level: Some("high".into()),
            review_date: None,
        }
    }

    fn approval(status: &str, latency_ms: Option<i64>) -> ApprovalFacts {
        ApprovalFacts {
            status: status.into(),
            reviewer_id: latency_ms.map(|_| "ana".into()),
            created_at: 1_000,
            resolved_at: latency_ms.map(|ms| 1_000 + ms),
        }
    }

    #[test]
    fn an_agent_without_oversight_scores_only_what_it_cannot_fail() {
        let card = scorecard(&agent(), &[], &Counts::default(), 0, 10);
        assert_eq!(card.score, 45, "{:?}", card.score_parts);
        assert_eq!(card.review_overdue, None);
    }

    #[test]
    fn the_parts_follow_the_documented_formula() {
        let approvals = [
            approval("approved", Some(30 * 60_000)),
            approval("denied", Some(90 * 60_000)),
            approval("approved", Some(10 * 60_000)),
            approval("expired", None),
        ];
        let counts = Counts {
            evaluated: 10,
            failed: 4,
            human_reviews: 1,
            blocks: 1,
            quarantines: 0,
        };
        let mut scheduled = agent();
        scheduled.review_date = Some(30 * DAY_MS);
        let card = scorecard(&scheduled, &approvals, &counts, 2, 29 * DAY_MS);
        assert_eq!(card.approvals.requested, 4);
        assert_eq!(card.approvals.expired, 1);
        assert_eq!(card.decided_by.get("ana"), Some(&3));
        assert_eq!(card.override_rate, 0.667);
        assert_eq!(card.unattended_rate, 0.25);
        assert_eq!(card.fail_rate, 0.4);
        assert_eq!(card.median_decision_seconds, Some(1800.0));
        assert_eq!(card.average_decision_seconds, Some(2600.0));
        // 40 coverage + 30 × 3/4 (23) + 15 (median 30 min) + 15 (review not yet due).
        assert_eq!(card.score, 93, "{:?}", card.score_parts);
        let overdue = scorecard(&scheduled, &approvals, &counts, 2, 31 * DAY_MS);
        assert_eq!(overdue.review_overdue, Some(true));
        assert_eq!(overdue.score, 78);
    }

    #[test]
    fn scopes_cover_by_global_agent_team_and_environment() {
        let a = agent();
        for scope in [
            "global",
            "agent:agt_1",
            "team:team_1",
            "environment:production",
        ] {
            assert!(covers(scope, &a), "{scope}");
        }
        for scope in ["agent:agt_2", "team:team_2", "environment:dev", "team:"] {
            assert!(!covers(scope, &a), "{scope}");
        }
    }
}
