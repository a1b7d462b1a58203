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
use serde::{Deserialize, Serialize};
use sqlx::AnyPool;
use utoipa::ToSchema;
use warden_shared::guardrail::scan_json;
use warden_shared::policy::{
    budget_scope, evaluate, rate_bucket, sort_for_evaluation, Counters, Guardrail,
    GuardrailVerdict, Outcome, Policy, PolicyConfig, PolicyType, RatePer, RequestFacts, Scope,
};
use warden_shared::pricing::usd_to_micros;
use warden_shared::registry::{Environment, Provider};
use warden_shared::timestamp::Timestamp;

use super::store;
use crate::api::envelope;
use crate::api::extract::ApiJson;
use crate::api::provider_names;
use crate::auth::{require, Authorized, Caller};
use crate::error::{ApiError, ApiResult};
use crate::proxy_state::load;
use crate::state::AppState;
use crate::validate::Text;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DryRunInput {
    pub agent_id: Text<1, 100>,
    /// A model provider, or `mcp` for a tool call through the MCP gateway (`model` is
    /// then the tool as agents see it, `<server>__<tool>`).
    #[schema(schema_with = crate::api::openapi_enums::provider_or_mcp)]
    pub provider: Provider,
    pub model: Text<1, 200>,
    /// Default: the agent's own environment.
    #[serde(default)]
    #[schema(schema_with = crate::api::openapi_enums::optional_environment)]
    pub environment: Option<Environment>,
    /// The request's estimated cost in US dollars, as the proxy would estimate it from
    /// the body and `max_tokens` (0 to 999999; default 0): budget policies refuse a
    /// request whose estimate does not fit below their block threshold.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 999_999)]
    pub estimated_cost_usd: Option<f64>,
    /// The request's body (or a tool call's arguments) for `guardrail` policies to scan,
    /// as the proxy would; omitted: guardrails are skipped.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub content: Option<serde_json::Value>,
}

#[utoipa::path(post, path = "/policies/evaluate", tag = "governance", request_body = DryRunInput,
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "Each enabled policy's result, in evaluation order", body = Envelope<Vec<Object>>),
        (status = 404, description = "The `agent_id` names no agent of the tenant (`not_found`)")))]
pub async fn evaluate_policies(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<DryRunInput>,
) -> ApiResult<Response> {
    Ok(envelope::ok(evaluate_for(&state, &caller, &input).await?))
}

/// The dry run for the caller: a provider Warden knows (or `mcp`), then [`dry_run`].
pub async fn evaluate_for(
    state: &AppState,
    caller: &Caller,
    input: &DryRunInput,
) -> ApiResult<Vec<DryRunResult>> {
    if input.provider != Provider::Mcp {
        provider_names::require_known(&state.providers, "provider", [&input.provider])?;
    }
    dry_run(state.db.pool(), &caller.tenant_id, input, state.clock.now()).await
}

/// One policy's result in the dry run's answer.
#[derive(Debug, Serialize)]
pub struct DryRunResult {
    pub policy_id: i64,
    pub policy_name: String,
    pub policy_type: PolicyType,
    pub result: Outcome,
    pub reason: Option<String>,
}

/// The per-policy results the proxy would reach for `input` now.
pub async fn dry_run(
    pool: &AnyPool,
    tenant_id: &str,
    input: &DryRunInput,
    now: Timestamp,
) -> ApiResult<Vec<DryRunResult>> {
    let estimated_cost_micros = match input.estimated_cost_usd {
        None => 0,
        Some(usd) if usd.is_finite() && (0.0..=999_999.0).contains(&usd) => usd_to_micros(usd),
        Some(_) => {
            return Err(ApiError::validation(
                "estimated_cost_usd",
                "estimated_cost_usd: must be a number from 0 to 999999",
            ))
        }
    };
    let (team_id, agent_environment) =
        store::live_agent_placement(pool, tenant_id, input.agent_id.as_str())
            .await?
            .ok_or_else(|| ApiError::not_found("agent"))?;
    let environment = match input.environment {
        Some(environment) => environment.as_str().to_owned(),
        None => agent_environment.ok_or_else(|| {
            ApiError::internal(format_args!(
                "database: agent {} has no environment",
                input.agent_id.as_str()
            ))
        })?,
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
        estimated_cost_micros,
    };
    let mut counters = LedgerCounters::read(pool, &policies, &request, now).await?;
    counters.content = input.content.clone();
    let results = evaluate(&policies, &request, &counters).results;
    Ok(policies
        .into_iter()
        .zip(results)
        .map(|(policy, result)| DryRunResult {
            policy_id: result.policy_id,
            policy_name: policy.name,
            policy_type: result.policy_type,
            result: result.result,
            reason: result.reason.map(|reason| reason.into_owned()),
        })
        .collect())
}

/// The counters of [`Counters`], read from the database before evaluating.
#[derive(Default)]
struct LedgerCounters {
    spend: HashMap<String, i64>,
    /// By rate-limit policy: the request's bucket is fixed for a dry run.
    minute: HashMap<i64, (i64, i64)>,
    granted: HashSet<i64>,
    /// What guardrails scan, if given.
    content: Option<serde_json::Value>,
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
                    let scope = budget_scope(&policy.scope);
                    let spent = store::month_spend_micros(
                        pool,
                        request.tenant_id,
                        &scope,
                        now.month_start(),
                    )
                    .await?;
                    counters.spend.insert(scope, spent.unwrap_or(0));
                }
                PolicyConfig::RateLimit { per, .. } => {
                    let bucket = rate_bucket(*per, request);
                    let counts =
                        store::bucket_counts_since(pool, request.tenant_id, minute_start, &bucket)
                            .await?;
                    counters.minute.insert(policy.id, counts);
                }
                PolicyConfig::RequireApproval(_) => {
                    let granted = store::live_grant_count(
                        pool,
                        request.tenant_id,
                        request.agent_id,
                        policy.id,
                        request.provider.as_str(),
                        request.model,
                        now.as_millis(),
                    )
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
    fn month_spend_micros(&self, scope: &Scope) -> i64 {
        self.spend.get(&budget_scope(scope)).copied().unwrap_or(0)
    }

    fn minute_counts(&self, policy_id: i64, _per: RatePer) -> (i64, i64) {
        self.minute.get(&policy_id).copied().unwrap_or((0, 0))
    }

    fn approval_granted(&self, policy_id: i64) -> bool {
        self.granted.contains(&policy_id)
    }

    fn guardrail(&self, _policy_id: i64, guardrail: &Guardrail) -> GuardrailVerdict {
        let Some(content) = &self.content else {
            return GuardrailVerdict::NotScanned;
        };
        // Scanned as the proxy scans a body, on a copy: a dry run changes nothing.
        let mut content = content.clone();
        let deadline = std::time::Instant::now() + DRY_RUN_SCAN;
        match scan_json(&mut content, &guardrail.scanner, false, deadline) {
            Ok(hits) if hits.is_empty() => GuardrailVerdict::Clean,
            Ok(hits) => GuardrailVerdict::Found(hits),
            Err(_) => GuardrailVerdict::Failed("its scan timed out".to_owned()),
        }
    }
}

/// How long a dry run's guardrail scan may take.
const DRY_RUN_SCAN: std::time::Duration = std::time::Duration::from_secs(1);
