//! Policy evaluation records (`/policy-evaluations`): per-policy results of proxy
//! decisions, reported by the proxies after the fact (never on the request path). Each
//! decision is a row pointing at a result set that identical decisions share (see
//! migration 0017); the records listed are a decision's set's members. A
//! `fail` also writes a `policy.violated` audit event, once: a resent report finds its
//! request id taken and writes nothing.

use std::collections::HashMap;

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;
use sqlx::any::AnyRow;
use sqlx::Row;
use utoipa::{IntoParams, ToSchema};
use warden_shared::policy::{Outcome, PolicyType};
use warden_shared::registry::Provider;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Page, PageQuery, Paged};
use crate::api::extract::{parse_raw_at, ApiQuery};
use crate::api::telemetry::ItemError;
use crate::api::validate::Text;
use crate::audit::{self, AuditEvent};
use crate::auth::{require, Authorized};
use crate::db::WriteTx;
use crate::error::{ApiError, ApiResult};
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
    /// The results in the policies' order, or the index of the batch's `result_lists`
    /// entry that holds them. Kept as text: most of a batch's decisions carry the same
    /// list, which is parsed and checked once per batch ([`ResultList::parse_at`]).
    #[schema(value_type = Object)]
    pub results: Box<RawValue>,
}

/// A decision's results, parsed and checked, with the digest that names its result set.
#[derive(Debug)]
pub struct ResultList {
    pub results: Vec<ReportedResult>,
    pub digest: String,
}

impl ResultList {
    /// Parses a results list found at `field`; a wrong shape is a 422 naming the field
    /// within it.
    pub fn parse_at(raw: &RawValue, field: &str) -> Result<ResultList, ApiError> {
        let results: Vec<ReportedResult> = parse_raw_at(raw, field)?;
        Ok(ResultList {
            digest: digest(&results),
            results,
        })
    }
}

/// A batch's results lists, each parsed and checked the first time a decision names it:
/// most of a batch's decisions carry the same list, either by index into the batch's
/// `result_lists` or written out.
pub struct ResultLists<'b> {
    /// The batch's `result_lists`, and what became of each once parsed.
    shared: &'b [Box<RawValue>],
    shared_parsed: Vec<Option<Result<usize, ItemError>>>,
    /// Lists written out in decisions, by their text.
    inline: HashMap<String, Result<usize, ItemError>>,
    parsed: Vec<ResultList>,
}

impl<'b> ResultLists<'b> {
    pub fn new(shared: &'b [Box<RawValue>]) -> Self {
        ResultLists {
            shared,
            shared_parsed: vec![None; shared.len()],
            inline: HashMap::new(),
            parsed: Vec::new(),
        }
    }

    pub fn get(&self, list: usize) -> &ResultList {
        &self.parsed[list]
    }

    /// The list a decision's `results` (at `field`) holds, or names by its index in
    /// `result_lists`. An error is the decision's, still to be given its index.
    pub fn of(&mut self, results: &RawValue, field: &str) -> Result<usize, ItemError> {
        let text = results.get();
        let Ok(position) = text.parse::<usize>() else {
            if let Some(known) = self.inline.get(text) {
                return known.clone();
            }
            let parsed = ResultList::parse_at(results, field);
            let outcome = self.place(parsed);
            self.inline.insert(text.to_owned(), outcome.clone());
            return outcome;
        };
        let Some(raw) = self.shared.get(position) else {
            return Err(item_error(ApiError::validation(
                field,
                format!("{field}: no list {position} in result_lists"),
            )));
        };
        if let Some(known) = &self.shared_parsed[position] {
            return known.clone();
        }
        let parsed = ResultList::parse_at(raw, &format!("result_lists[{position}]"));
        let outcome = self.place(parsed);
        self.shared_parsed[position] = Some(outcome.clone());
        outcome
    }

    fn place(&mut self, parsed: Result<ResultList, ApiError>) -> Result<usize, ItemError> {
        let list = parsed.map_err(item_error)?;
        self.parsed.push(list);
        Ok(self.parsed.len() - 1)
    }
}

fn item_error(error: ApiError) -> ItemError {
    ItemError::from_api_error(0, error)
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

/// Bound values per decision row and per result set member.
const DECISION_COLUMNS: usize = 7;
const MEMBER_COLUMNS: usize = 8;

/// The API id of a decision's result: unique, and in the order results were recorded.
const POSITIONS_PER_DECISION: i64 = 1 << 20;

/// One decision to write: who asked for what, when, and its checked results.
#[derive(Debug, Clone, Copy)]
pub struct DecisionRow<'a> {
    pub tenant_id: &'a str,
    pub request_id: &'a str,
    pub agent_id: &'a str,
    pub provider: Provider,
    pub model: &'a str,
    pub evaluated_at: Timestamp,
    pub list: &'a ResultList,
}

/// Writes `decisions`: a row each, pointing at the tenant's result set for its results
/// (created the first time those results are seen), and a `policy.violated` audit event
/// per failure. Returns how many results were written. The caller has made sure each
/// decision is new: the proxies' usage records carry their decisions and are written
/// once each, and a decision batch is written once per batch id.
pub async fn record_evaluations(
    tx: &mut WriteTx,
    decisions: &[DecisionRow<'_>],
) -> Result<usize, sqlx::Error> {
    let sets = result_sets(tx, decisions).await?;
    let rows: Vec<(&DecisionRow<'_>, i64)> = decisions
        .iter()
        .filter_map(|row| Some((row, *sets.get(&(row.tenant_id, row.list.digest.as_str()))?)))
        .collect();
    for chunk in rows.chunks(crate::ledger::rows_per_statement(tx, DECISION_COLUMNS)) {
        let values = crate::ledger::placeholders(tx, chunk.len(), DECISION_COLUMNS, 1);
        let sql = crate::ledger::for_backend(
            tx,
            format!(
                "INSERT INTO policy_decisions (tenant_id, request_id, agent_id, provider, model, \
                 evaluated_at, result_set_id) VALUES {}",
                values
            ),
        );
        let mut query = sqlx::query(&sql);
        for (row, set_id) in chunk {
            query = query
                .bind(row.tenant_id)
                .bind(row.request_id)
                .bind(row.agent_id)
                .bind(row.provider.as_str())
                .bind(row.model)
                .bind(row.evaluated_at.as_millis())
                .bind(*set_id);
        }
        query.execute(&mut **tx).await?;
    }
    let mut written = 0;
    for (row, _) in &rows {
        written += row.list.results.len();
        for result in row
            .list
            .results
            .iter()
            .filter(|r| r.result == Outcome::Fail)
        {
            audit_violation(tx, row, result).await?;
        }
    }
    Ok(written)
}

/// A stable digest of a decision's results, in order: decisions that came out the same
/// share a result set.
fn digest(results: &[ReportedResult]) -> String {
    use std::fmt::Write;
    let mut canonical = String::with_capacity(results.len() * 64);
    for result in results {
        let reason = result.reason.as_ref().map(Text::as_str);
        let _ = write!(canonical, "{}:", result.policy_id);
        // Each text after its length, so no two different lists encode alike.
        for field in [
            result.policy_name.as_str(),
            result.policy_type.as_str(),
            result.result.as_str(),
            reason.unwrap_or(""),
        ] {
            let _ = write!(canonical, "{}:{field}", field.len());
        }
        canonical.push(if reason.is_some() { '+' } else { '-' });
    }
    warden_shared::keys::hash_credential(&canonical)
}

/// The result set id of every `(tenant, digest)` in the batch, creating (with their
/// members) the sets not seen before. Another replica may create the same set at the
/// same time: the unique digest decides, and the loser reads the winner's id.
async fn result_sets<'a>(
    tx: &mut WriteTx,
    decisions: &[DecisionRow<'a>],
) -> Result<HashMap<(&'a str, &'a str), i64>, sqlx::Error> {
    // Each distinct set once, with its results.
    let mut wanted: HashMap<(&str, &str), &ResultList> = HashMap::new();
    for row in decisions {
        wanted
            .entry((row.tenant_id, row.list.digest.as_str()))
            .or_insert(row.list);
    }
    let mut found: HashMap<(&str, &str), i64> = HashMap::new();
    let mut keys: Vec<(&str, &str)> = wanted.keys().copied().collect();
    keys.sort_unstable();
    // Existing sets, then the missing ones created, then those another writer created.
    for create in [false, true, false] {
        let missing: Vec<(&str, &str)> = keys
            .iter()
            .copied()
            .filter(|key| !found.contains_key(key))
            .collect();
        if missing.is_empty() {
            break;
        }
        let ids = if create {
            create_sets(tx, &missing, &wanted).await?
        } else {
            find_sets(tx, &missing).await?
        };
        for ((tenant_id, digest), id) in ids {
            if let Ok(at) = keys.binary_search_by(|k| k.cmp(&(&tenant_id, &digest))) {
                found.insert(keys[at], id);
            }
        }
    }
    Ok(found)
}

/// Set ids by `(tenant, digest)`: `sql` holds `{}` where the pairs' placeholders go and
/// returns `id, tenant_id, digest`.
async fn set_ids(
    tx: &mut WriteTx,
    keys: &[(&str, &str)],
    sql: fn(&str) -> String,
) -> Result<Vec<((String, String), i64)>, sqlx::Error> {
    let mut ids = Vec::new();
    for chunk in keys.chunks(crate::ledger::rows_per_statement(tx, 2)) {
        let values = crate::ledger::placeholders(tx, chunk.len(), 2, 1);
        let sql = crate::ledger::for_backend(tx, sql(&values));
        let mut query = sqlx::query(&sql);
        for (tenant_id, digest) in chunk {
            query = query.bind(*tenant_id).bind(*digest);
        }
        for row in query.fetch_all(&mut **tx).await? {
            ids.push((
                (row.try_get("tenant_id")?, row.try_get("digest")?),
                row.try_get("id")?,
            ));
        }
    }
    Ok(ids)
}

async fn find_sets(
    tx: &mut WriteTx,
    keys: &[(&str, &str)],
) -> Result<Vec<((String, String), i64)>, sqlx::Error> {
    set_ids(tx, keys, |pairs| {
        format!(
            "SELECT id, tenant_id, digest FROM policy_result_sets \
             WHERE (tenant_id, digest) IN (VALUES {pairs})"
        )
    })
    .await
}

/// Creates the sets of `keys` not created meanwhile by another writer, with their
/// members; returns the ids of those it created.
async fn create_sets(
    tx: &mut WriteTx,
    keys: &[(&str, &str)],
    wanted: &HashMap<(&str, &str), &ResultList>,
) -> Result<Vec<((String, String), i64)>, sqlx::Error> {
    let created = set_ids(tx, keys, |pairs| {
        format!(
            "INSERT INTO policy_result_sets (tenant_id, digest) VALUES {pairs} \
             ON CONFLICT (tenant_id, digest) DO NOTHING RETURNING id, tenant_id, digest"
        )
    })
    .await?;
    let mut members: Vec<(i64, &str, i64, &ReportedResult)> = Vec::new();
    for ((tenant_id, digest), set_id) in &created {
        let Some(list) = wanted.get(&(tenant_id.as_str(), digest.as_str())) else {
            continue;
        };
        for (position, result) in (0..).zip(&list.results) {
            members.push((*set_id, tenant_id, position, result));
        }
    }
    for chunk in members.chunks(crate::ledger::rows_per_statement(tx, MEMBER_COLUMNS)) {
        let values = crate::ledger::placeholders(tx, chunk.len(), MEMBER_COLUMNS, 1);
        let sql = crate::ledger::for_backend(
            tx,
            format!(
                "INSERT INTO policy_result_set_members (set_id, position, tenant_id, policy_id, \
                 policy_name, policy_type, result, reason) VALUES {}",
                values
            ),
        );
        let mut query = sqlx::query(&sql);
        for (set_id, tenant_id, position, result) in chunk {
            query = query
                .bind(*set_id)
                .bind(*position)
                .bind(*tenant_id)
                .bind(result.policy_id)
                .bind(result.policy_name.as_str())
                .bind(result.policy_type.as_str())
                .bind(result.result.as_str())
                .bind(result.reason.as_ref().map(Text::as_str));
        }
        query.execute(&mut **tx).await?;
    }
    Ok(created)
}

async fn audit_violation(
    tx: &mut WriteTx,
    row: &DecisionRow<'_>,
    result: &ReportedResult,
) -> Result<(), sqlx::Error> {
    audit::record(
        tx,
        row.tenant_id,
        "proxy",
        row.evaluated_at,
        AuditEvent {
            event_type: "policy.violated",
            target_type: "policy",
            target_id: &result.policy_id.to_string(),
            details: json!({
                "policy_name": result.policy_name,
                "policy_type": result.policy_type.as_str(),
                "reason": result.reason,
                "agent_id": row.agent_id,
                "provider": row.provider.as_str(),
                "model": row.model,
                "request_id": row.request_id,
            }),
        },
    )
    .await
}

/// An evaluation record as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct PolicyEvaluation {
    /// Unique and stable: the decision's id times 2^20 plus the result's position in it.
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
    const FROM: &str = "FROM policy_decisions d \
         JOIN policy_result_set_members r ON r.set_id = d.result_set_id \
         WHERE d.tenant_id = $1 AND ($2 IS NULL OR r.policy_id = $2) \
         AND ($3 IS NULL OR d.agent_id = $3) AND ($4 IS NULL OR r.result = $4)";
    let pool = state.db.pool();
    let rows = sqlx::query(&format!(
        "SELECT d.id AS decision_id, r.position, r.policy_id, r.policy_name, r.policy_type, \
         r.result, r.reason, d.agent_id, d.provider, d.model, d.request_id, d.evaluated_at \
         {FROM} ORDER BY d.evaluated_at DESC, d.id DESC, r.position LIMIT $5 OFFSET $6"
    ))
    .bind(&caller.tenant_id)
    .bind(query.policy_id)
    .bind(agent_id)
    .bind(result)
    .bind(page.limit)
    .bind(page.offset())
    .fetch_all(pool)
    .await?;
    let total: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) {FROM}"))
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
        id: row.try_get::<i64, _>("decision_id")? * POSITIONS_PER_DECISION
            + row.try_get::<i64, _>("position")?,
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
