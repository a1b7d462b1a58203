//! Policy evaluation records (`/policy-evaluations`): one row per policy per proxy
//! decision, reported by the proxies after the fact (never on the request path). A
//! `fail` also writes a `policy.violated` audit event, once: a resent report finds its
//! evaluation ids taken and writes nothing.

use std::collections::HashSet;

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::any::AnyRow;
use sqlx::Row;
use utoipa::{IntoParams, ToSchema};
use warden_shared::policy::{Outcome, PolicyType};
use warden_shared::registry::Provider;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Page, PageQuery, Paged};
use crate::api::extract::ApiQuery;
use crate::api::validate::Text;
use crate::audit::{self, AuditEvent};
use crate::auth::{require, Authorized};
use crate::db::WriteTx;
use crate::error::ApiResult;
use crate::state::AppState;

/// One proxy decision: who asked for what, and every policy's result.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EvaluationReport {
    pub request_id: Text<1, 100>,
    pub agent_id: Text<1, 100>,
    #[schema(value_type = String)]
    pub provider: Provider,
    pub model: Text<1, 200>,
    #[schema(value_type = String, format = DateTime)]
    pub evaluated_at: Timestamp,
    pub results: Vec<ReportedResult>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportedResult {
    pub policy_id: i64,
    pub policy_name: Text<1, 200>,
    #[schema(value_type = String)]
    pub policy_type: PolicyType,
    #[schema(value_type = String)]
    pub result: Outcome,
    #[serde(default)]
    pub reason: Option<Text<0, 1000>>,
}

/// Bound values per evaluation row.
const COLUMNS: usize = 12;

/// Writes the results of `reports` (each with its tenant id) with a few multi-row
/// inserts; returns how many were new. A proxy under load reports every policy of every
/// request, so one statement per row could not keep up (its bounded queue then dropped
/// reports).
pub async fn record_evaluations(
    tx: &mut WriteTx,
    reports: &[(&str, &EvaluationReport)],
) -> Result<usize, sqlx::Error> {
    let rows: Vec<(&str, String, &EvaluationReport, &ReportedResult)> = reports
        .iter()
        .flat_map(|(tenant_id, report)| {
            report.results.iter().map(move |result| {
                let evaluation_id = format!("{}:{}", report.request_id.as_str(), result.policy_id);
                (*tenant_id, evaluation_id, *report, result)
            })
        })
        .collect();
    let mut written = 0;
    let per_statement = crate::ledger::rows_per_statement(tx, COLUMNS);
    for chunk in rows.chunks(per_statement) {
        let sql = crate::ledger::for_backend(
            tx,
            format!(
                "INSERT INTO policy_evaluations (tenant_id, evaluation_id, request_id, policy_id, \
             policy_name, policy_type, agent_id, provider, model, result, reason, evaluated_at) \
             VALUES {} ON CONFLICT (tenant_id, evaluation_id) DO NOTHING \
             RETURNING tenant_id, evaluation_id",
                crate::ledger::placeholders(chunk.len(), COLUMNS, 1)
            ),
        );
        let mut query = sqlx::query(&sql);
        for (tenant_id, evaluation_id, report, result) in chunk {
            query = query
                .bind(*tenant_id)
                .bind(evaluation_id.as_str())
                .bind(report.request_id.as_str())
                .bind(result.policy_id)
                .bind(result.policy_name.as_str())
                .bind(result.policy_type.as_str())
                .bind(report.agent_id.as_str())
                .bind(report.provider.as_str())
                .bind(report.model.as_str())
                .bind(result.result.as_str())
                .bind(result.reason.as_ref().map(Text::as_str))
                .bind(report.evaluated_at.as_millis());
        }
        let inserted: HashSet<(String, String)> = query
            .fetch_all(&mut **tx)
            .await?
            .iter()
            .map(|row| Ok((row.try_get("tenant_id")?, row.try_get("evaluation_id")?)))
            .collect::<Result<_, sqlx::Error>>()?;
        written += inserted.len();
        // A new `fail` is audited once; a resent report's rows were not inserted.
        for (tenant_id, evaluation_id, report, result) in chunk {
            if result.result == Outcome::Fail
                && inserted.contains(&((*tenant_id).to_owned(), evaluation_id.clone()))
            {
                audit_violation(tx, tenant_id, report, result).await?;
            }
        }
    }
    Ok(written)
}

async fn audit_violation(
    tx: &mut WriteTx,
    tenant_id: &str,
    report: &EvaluationReport,
    result: &ReportedResult,
) -> Result<(), sqlx::Error> {
    audit::record(
        tx,
        tenant_id,
        "proxy",
        report.evaluated_at,
        AuditEvent {
            event_type: "policy.violated",
            target_type: "policy",
            target_id: &result.policy_id.to_string(),
            details: json!({
                "policy_name": result.policy_name,
                "policy_type": result.policy_type.as_str(),
                "reason": result.reason,
                "agent_id": report.agent_id,
                "provider": report.provider.as_str(),
                "model": report.model,
                "request_id": report.request_id,
            }),
        },
    )
    .await
}

/// An evaluation record as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct PolicyEvaluation {
    pub id: i64,
    pub policy_id: i64,
    pub policy_name: String,
    pub policy_type: String,
    /// `pass`, `fail` or `skip`.
    pub result: String,
    pub reason: Option<String>,
    pub agent_id: String,
    pub provider: String,
    pub model: String,
    /// The proxy's request id (shared by the results of one decision).
    pub request_id: String,
    #[schema(value_type = String, format = DateTime)]
    pub evaluated_at: Timestamp,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EvaluationQuery {
    pub policy_id: Option<i64>,
    pub agent_id: Option<Text<1, 100>>,
    #[param(value_type = Option<String>)]
    pub result: Option<Outcome>,
    pub page: Option<i64>,
    pub limit: Option<i64>,
}

#[utoipa::path(get, path = "/policy-evaluations", tag = "governance", params(EvaluationQuery),
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "One page of evaluation records, newest first", body = Paged<PolicyEvaluation>)))]
pub async fn list_evaluations(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<EvaluationQuery>,
) -> ApiResult<Response> {
    let page: Page = PageQuery {
        page: query.page,
        limit: query.limit,
    }
    .try_into()?;
    let result = query.result.map(Outcome::as_str);
    let agent_id = query.agent_id.as_ref().map(Text::as_str);
    const FILTER: &str = "WHERE tenant_id = $1 AND ($2 IS NULL OR policy_id = $2) \
         AND ($3 IS NULL OR agent_id = $3) AND ($4 IS NULL OR result = $4)";
    let pool = state.db.pool();
    let rows = sqlx::query(&format!(
        "SELECT id, policy_id, policy_name, policy_type, result, reason, agent_id, provider, \
         model, request_id, evaluated_at FROM policy_evaluations {FILTER} \
         ORDER BY evaluated_at DESC, id DESC LIMIT $5 OFFSET $6"
    ))
    .bind(&caller.tenant_id)
    .bind(query.policy_id)
    .bind(agent_id)
    .bind(result)
    .bind(page.limit)
    .bind(page.offset())
    .fetch_all(pool)
    .await?;
    let total: i64 =
        sqlx::query_scalar(&format!("SELECT COUNT(*) FROM policy_evaluations {FILTER}"))
            .bind(&caller.tenant_id)
            .bind(query.policy_id)
            .bind(agent_id)
            .bind(result)
            .fetch_one(pool)
            .await?;
    let evaluations = rows
        .iter()
        .map(evaluation_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(envelope::paged(evaluations, page, total))
}

fn evaluation_from_row(row: &AnyRow) -> Result<PolicyEvaluation, sqlx::Error> {
    Ok(PolicyEvaluation {
        id: row.try_get("id")?,
        policy_id: row.try_get("policy_id")?,
        policy_name: row.try_get("policy_name")?,
        policy_type: row.try_get("policy_type")?,
        result: row.try_get("result")?,
        reason: row.try_get("reason")?,
        agent_id: row.try_get("agent_id")?,
        provider: row.try_get("provider")?,
        model: row.try_get("model")?,
        request_id: row.try_get("request_id")?,
        evaluated_at: Timestamp::from_millis(row.try_get("evaluated_at")?),
    })
}
