//! `POST /policies/evaluate`: the proxy's decision for a described request, made by the
//! same evaluator over the same policies, without a request, an approval or usage.
//!
//! The counters the stateful policies read come from the ledger instead of a proxy's
//! memory: month-to-date spend of the budget scope, the requests and tokens recorded in
//! the current minute for a rate limit's bucket, and live approval grants. The request's
//! own cost estimate is 0 (there is no body).

use std::collections::{HashMap, HashSet};

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use sqlx::{AnyPool, Row};
use utoipa::ToSchema;
use warden_shared::policy::{
    evaluate, rate_bucket, sort_for_evaluation, Counters, Policy, PolicyConfig, PolicyResult,
    RequestFacts,
};
use warden_shared::registry::{Environment, Provider};
use warden_shared::timestamp::Timestamp;

use crate::api::envelope;
use crate::api::extract::ApiJson;
use crate::api::validate::Text;
use crate::auth::{require, Authorized};
use crate::error::{ApiError, ApiResult};
use crate::proxy_state::load;
use crate::state::AppState;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DryRunInput {
    pub agent_id: Text<1, 100>,
    #[schema(value_type = String, example = "openai")]
    pub provider: Provider,
    pub model: Text<1, 200>,
    /// Default: the agent's own environment.
    #[serde(default)]
    #[schema(value_type = Option<String>, example = "production")]
    pub environment: Option<Environment>,
}

#[utoipa::path(post, path = "/policies/evaluate", tag = "governance", request_body = DryRunInput,
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "Each enabled policy's result, in evaluation order", body = Envelope<Vec<Object>>)))]
pub async fn evaluate_policies(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<DryRunInput>,
) -> ApiResult<Response> {
    let results = dry_run(
        state.db.pool(),
        &caller.tenant_id,
        &input,
        state.clock.now(),
    )
    .await?;
    Ok(envelope::ok(results))
}

/// The per-policy results the proxy would reach for `input` now.
pub async fn dry_run(
    pool: &AnyPool,
    tenant_id: &str,
    input: &DryRunInput,
    now: Timestamp,
) -> ApiResult<Vec<PolicyResult>> {
    let agent = sqlx::query(
        "SELECT team_id, environment FROM agents \
         WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(input.agent_id.as_str())
    .fetch_optional(pool)
    .await?
    .ok_or_else(|| ApiError::not_found("agent"))?;
    let team_id: Option<String> = agent.try_get("team_id")?;
    let environment = match input.environment {
        Some(environment) => environment.as_str().to_owned(),
        None => agent.try_get("environment")?,
    };
    let mut policies: Vec<Policy> = load::tenant_policies(pool, tenant_id)
        .await?
        .iter()
        .filter_map(|state| Policy::from_state(state).ok())
        .collect();
    sort_for_evaluation(&mut policies);
    let request = RequestFacts {
        tenant_id,
        agent_id: input.agent_id.as_str(),
        team_id: team_id.as_deref(),
        environment: &environment,
        api_key_id: None,
        provider: input.provider,
        model: input.model.as_str(),
        estimated_cost_micros: 0,
    };
    let counters = LedgerCounters::read(pool, &policies, &request, now).await?;
    Ok(evaluate(&policies, &request, &counters).results)
}

/// The counters of [`Counters`], read from the database before evaluating.
#[derive(Default)]
struct LedgerCounters {
    spend: HashMap<String, i64>,
    minute: HashMap<(i64, String), (i64, i64)>,
    granted: HashSet<i64>,
}

impl LedgerCounters {
    async fn read(
        pool: &AnyPool,
        policies: &[Policy],
        request: &RequestFacts<'_>,
        now: Timestamp,
    ) -> Result<LedgerCounters, sqlx::Error> {
        let mut counters = LedgerCounters::default();
        let minute_start = now.as_millis() - now.as_millis().rem_euclid(60_000);
        for policy in policies {
            match &policy.config {
                PolicyConfig::BudgetLimit { .. } => {
                    let scope = warden_shared::policy::budget_scope(&policy.scope);
                    let spent: Option<i64> = sqlx::query_scalar(
                        "SELECT cost_micros FROM usage_spend_monthly \
                         WHERE tenant_id = $1 AND scope = $2 AND month = $3",
                    )
                    .bind(request.tenant_id)
                    .bind(&scope)
                    .bind(now.month_start())
                    .fetch_optional(pool)
                    .await?;
                    counters.spend.insert(scope, spent.unwrap_or(0));
                }
                PolicyConfig::RateLimit { per, .. } => {
                    let bucket = rate_bucket(*per, request);
                    let row = sqlx::query(
                        "SELECT COUNT(*) AS requests, \
                         CAST(COALESCE(SUM(r.input_tokens + r.output_tokens), 0) AS BIGINT) AS tokens \
                         FROM usage_records r LEFT JOIN agents a \
                         ON a.tenant_id = r.tenant_id AND a.id = r.agent_id \
                         WHERE r.tenant_id = $1 AND r.recorded_at >= $2 \
                         AND ($3 = 'tenant' OR $3 = 'agent:' || r.agent_id \
                         OR $3 = 'team:' || COALESCE(a.team_id, ''))",
                    )
                    .bind(request.tenant_id)
                    .bind(minute_start)
                    .bind(&bucket)
                    .fetch_one(pool)
                    .await?;
                    counters.minute.insert(
                        (policy.id, bucket),
                        (row.try_get("requests")?, row.try_get("tokens")?),
                    );
                }
                PolicyConfig::RequireApproval(_) => {
                    let granted: i64 = sqlx::query_scalar(
                        "SELECT COUNT(*) FROM approvals WHERE tenant_id = $1 AND agent_id = $2 \
                         AND policy_id = $3 AND provider = $4 AND model = $5 \
                         AND status = 'approved' AND grant_until > $6",
                    )
                    .bind(request.tenant_id)
                    .bind(request.agent_id)
                    .bind(policy.id)
                    .bind(request.provider.as_str())
                    .bind(request.model)
                    .bind(now.as_millis())
                    .fetch_one(pool)
                    .await?;
                    if granted > 0 {
                        counters.granted.insert(policy.id);
                    }
                }
                _ => {}
            }
        }
        Ok(counters)
    }
}

impl Counters for LedgerCounters {
    fn month_spend_micros(&self, budget_scope: &str) -> i64 {
        self.spend.get(budget_scope).copied().unwrap_or(0)
    }

    fn minute_counts(&self, policy_id: i64, bucket: &str) -> (i64, i64) {
        self.minute
            .get(&(policy_id, bucket.to_owned()))
            .copied()
            .unwrap_or((0, 0))
    }

    fn approval_granted(&self, policy_id: i64) -> bool {
        self.granted.contains(&policy_id)
    }
}
