//! `POST /internal/v1/policy-decisions`: what the proxies decided under policies, sent
//! in batches after the fact like usage: the requests they refused or held for
//! approval, and those they let through that ended without a usage record (a forwarded
//! request's decision rides on its usage record, see `usage_batches`). Each decision
//! carries its per-policy results (written as evaluation records) and, when a
//! `require_approval` policy held the request, the approval to queue (deduplicated while
//! pending). A batch is one transaction, written once per `batch_id`; a decision the
//! control plane cannot place (an agent or policy deleted meanwhile, a malformed item)
//! is reported in `errors` and the rest are written.

use std::collections::{HashMap, HashSet};

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use utoipa::ToSchema;

use super::ServiceCaller;
use crate::api::approvals::{store as approvals, APPROVAL_TTL_MS, DENIAL_HOLD_MS};
use crate::api::envelope::{self, Envelope};
use crate::api::extract::{parse_raw, ApiJson};
use crate::api::policies::{
    record_evaluations, DecisionRow, EvaluationReport, ReportedResult, ResultLists,
};
use crate::api::telemetry::ItemError;
use crate::api::validate::Text;
use crate::clock::Clock;
use crate::db::Db;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// The most decisions one batch may carry.
pub const MAX_DECISIONS: usize = 1000;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionBatch {
    /// The idempotency key: a batch id seen before writes nothing.
    pub batch_id: Text<1, 100>,
    /// Results lists the decisions share: a decision's `evaluation.results` may be the
    /// index of its list here instead of the list itself. A batch's decisions mostly
    /// came out alike, so the proxy sends each distinct list once.
    #[serde(default)]
    #[schema(value_type = Vec<Vec<ReportedResult>>)]
    pub result_lists: Vec<Box<RawValue>>,
    #[schema(value_type = Vec<ProxyDecision>)]
    pub decisions: Vec<Box<RawValue>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProxyDecision {
    pub tenant_id: Text<1, 100>,
    pub evaluation: EvaluationReport,
    /// Set when a `require_approval` policy held the request.
    #[serde(default)]
    pub approval: Option<ApprovalAsk>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalAsk {
    pub policy_id: i64,
    /// Includes `provider` and `model`.
    #[schema(value_type = Object)]
    pub request_context: Value,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DecisionAck {
    pub batch_id: String,
    pub evaluations_written: usize,
    pub approvals_created: usize,
    pub rejected: usize,
    pub errors: Vec<ItemError>,
}

#[utoipa::path(post, path = "/internal/v1/policy-decisions", tag = "internal", request_body = DecisionBatch,
    security(("service_token" = [])),
    responses((status = 200, description = "What was written and what was refused", body = Envelope<DecisionAck>)))]
pub async fn ingest_policy_decisions(
    _service: ServiceCaller,
    State(state): State<AppState>,
    ApiJson(batch): ApiJson<DecisionBatch>,
) -> ApiResult<Response> {
    if batch.decisions.len() > MAX_DECISIONS {
        return Err(ApiError::validation(
            "decisions",
            format!("decisions: at most {MAX_DECISIONS} per batch"),
        ));
    }
    if batch.result_lists.len() > MAX_DECISIONS {
        return Err(ApiError::validation(
            "result_lists",
            format!("result_lists: at most {MAX_DECISIONS} per batch"),
        ));
    }
    let now = state.clock.now();
    let mut ack = DecisionAck {
        batch_id: batch.batch_id.as_str().to_owned(),
        evaluations_written: 0,
        approvals_created: 0,
        rejected: 0,
        errors: Vec::new(),
    };
    let mut tx = state.db.begin_write().await?;
    // The batch id is the idempotency key: the proxy resends the very same batch until
    // it is acknowledged, and a batch seen before writes nothing (its errors are still
    // reported). Under concurrent resends on PostgreSQL, the second waits on the key.
    let first_time = sqlx::query(
        "INSERT INTO policy_decision_batches (batch_id, received_at) VALUES ($1, $2) \
         ON CONFLICT (batch_id) DO NOTHING",
    )
    .bind(batch.batch_id.as_str())
    .bind(now.as_millis())
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    // A batch is mostly a few agents' requests: each agent is looked up once.
    let mut teams: HashMap<(String, String), Option<Option<String>>> = HashMap::new();
    let mut placed: Vec<(usize, ProxyDecision, Option<String>, usize)> = Vec::new();
    let mut lists = ResultLists::new(&batch.result_lists);
    for (index, raw) in batch.decisions.into_iter().enumerate() {
        let decision = match parse_raw::<ProxyDecision>(&raw) {
            Ok(decision) => decision,
            Err(error) => {
                ack.errors.push(ItemError::from_api_error(index, error));
                continue;
            }
        };
        let list = match lists.of(&decision.evaluation.results, "evaluation.results") {
            Ok(list) => list,
            Err(error) => {
                ack.errors.push(ItemError { index, ..error });
                continue;
            }
        };
        let key = (
            decision.tenant_id.as_str().to_owned(),
            decision.evaluation.agent_id.as_str().to_owned(),
        );
        let team_id = match teams.get(&key) {
            Some(found) => found.clone(),
            None => {
                let found: Option<Option<String>> = sqlx::query_scalar(
                    "SELECT team_id FROM agents WHERE tenant_id = $1 AND id = $2",
                )
                .bind(&key.0)
                .bind(&key.1)
                .fetch_optional(&mut *tx)
                .await?;
                teams.insert(key, found.clone());
                found
            }
        };
        let Some(team_id) = team_id else {
            ack.errors.push(ItemError::from_api_error(
                index,
                ApiError::validation(
                    "evaluation.agent_id",
                    "agent_id: no such agent in the tenant",
                ),
            ));
            continue;
        };
        placed.push((index, decision, team_id, list));
    }
    if first_time {
        // A request reported twice in one batch counts once.
        let mut seen = HashSet::new();
        let rows: Vec<DecisionRow<'_>> = placed
            .iter()
            .filter(|(_, decision, _, _)| {
                seen.insert((
                    decision.tenant_id.as_str(),
                    decision.evaluation.request_id.as_str(),
                ))
            })
            .map(|(_, decision, _, list)| {
                let report = &decision.evaluation;
                DecisionRow {
                    tenant_id: decision.tenant_id.as_str(),
                    request_id: report.request_id.as_str(),
                    agent_id: report.agent_id.as_str(),
                    provider: report.provider,
                    model: report.model.as_str(),
                    evaluated_at: report.evaluated_at,
                    list: lists.get(*list),
                }
            })
            .collect();
        ack.evaluations_written = record_evaluations(&mut tx, &rows).await?;
    }
    for (index, decision, team_id, _) in &placed {
        let Some(ask) = &decision.approval else {
            continue;
        };
        let tenant_id = decision.tenant_id.as_str();
        let report = &decision.evaluation;
        let policy_exists: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM policies WHERE tenant_id = $1 AND id = $2")
                .bind(tenant_id)
                .bind(ask.policy_id)
                .fetch_one(&mut *tx)
                .await?;
        if policy_exists == 0 || !ask.request_context.is_object() {
            ack.errors.push(ItemError::from_api_error(
                *index,
                ApiError::validation(
                    "approval",
                    "approval: no such policy in the tenant, or a request_context that is not an object",
                ),
            ));
            continue;
        }
        if !first_time {
            continue;
        }
        let request = approvals::Request {
            tenant_id,
            policy_id: ask.policy_id,
            agent_id: report.agent_id.as_str(),
            team_id: team_id.as_deref(),
            provider: report.provider.as_str(),
            model: report.model.as_str(),
            request_context: &ask.request_context,
        };
        if approvals::request(&mut tx, &request, now, APPROVAL_TTL_MS, DENIAL_HOLD_MS)
            .await?
            .is_some()
        {
            ack.approvals_created += 1;
        }
    }
    ack.errors.sort_by_key(|error| error.index);
    tx.commit().await?;
    ack.rejected = ack.errors.len();
    Ok(envelope::ok(ack))
}

/// How long a decision batch's id is remembered: far longer than a proxy retries a batch
/// (every 15 s at most, until answered).
pub const BATCH_ID_RETENTION_MS: i64 = 7 * 24 * 3_600_000;

/// Forgets the ids of decision batches received before `before_ms`; returns how many.
pub async fn forget_batches_before(db: &Db, before_ms: i64) -> Result<u64, sqlx::Error> {
    let mut tx = db.begin_write().await?;
    let forgotten = sqlx::query("DELETE FROM policy_decision_batches WHERE received_at < $1")
        .bind(before_ms)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(forgotten)
}

/// Forgets batch ids older than [`BATCH_ID_RETENTION_MS`] every hour until the app stops
/// (the first round an hour after start: nothing can be a week old before).
pub async fn forget_old_batches_every(
    db: Db,
    clock: Clock,
    stopping: tokio::sync::watch::Receiver<bool>,
) {
    let hour = std::time::Duration::from_secs(3_600);
    crate::periodic::every(hour, hour, stopping, || async {
        let before = clock.now().as_millis() - BATCH_ID_RETENTION_MS;
        if let Err(error) = forget_batches_before(&db, before).await {
            tracing::warn!(%error, "cannot forget old decision batch ids");
        }
    })
    .await;
}
