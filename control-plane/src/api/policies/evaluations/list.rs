//! `GET /policy-evaluations`: the two kinds of decisions (on usage records, and
//! `policy_decisions` rows) read as one list, newest first.

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;
use sqlx::Row;
use utoipa::{IntoParams, ToSchema};
use warden_shared::policy::Outcome;
use warden_shared::timestamp::Timestamp;

use super::POSITIONS_PER_DECISION;
use crate::api::envelope::{self, Page, PageQuery, Paged, COUNT_LIMIT};
use crate::api::extract::ApiQuery;
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;
use crate::validate::Text;

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
    /// The model as the agent asked for it.
    pub model: String,
    /// The proxy's request id (shared by the results of one decision); for a forwarded
    /// request, the id of its usage record.
    pub request_id: String,
    /// When the proxy decided.
    #[schema(value_type = String, format = DateTime)]
    pub evaluated_at: Timestamp,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EvaluationQuery {
    pub policy_id: Option<i64>,
    pub agent_id: Option<Text<1, 100>>,
    #[param(value_type = Option<String>, pattern = "^(pass|fail|skip)$")]
    pub result: Option<Outcome>,
    #[param(minimum = 1, maximum = 1000000, default = 1)]
    pub page: Option<i64>,
    #[param(minimum = 1, maximum = 100, default = 20)]
    pub limit: Option<i64>,
}

/// Newest first by when the request ended: a refused request ends when it is decided
/// (`evaluated_at`), a forwarded one when its answer does (its usage record's time, whose
/// index serves the order). Then by decision, and by the results' order within one.
#[utoipa::path(get, path = "/policy-evaluations", tag = "governance", params(EvaluationQuery),
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "One page of evaluation records, newest first by when the request ended (a refused request when it was decided, a forwarded one when its answer ended)", body = Paged<PolicyEvaluation>)))]
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
    let filters = Filters::of(&query);
    let pool = state.db.pool();
    let list = filters.page_query();
    // Each side's newest matching decisions that can reach this page: a page's rows come
    // from at most offset + limit decisions, each of one side or the other.
    let rows = filters
        .bind(sqlx::query(&list), &caller.tenant_id)
        .bind(page.offset() + page.limit)
        .bind(page.limit)
        .bind(page.offset())
        .fetch_all(pool)
        .await?;
    let count = format!(
        "SELECT (SELECT COUNT(*) FROM (SELECT 1 {} LIMIT ${cap}) d) \
         + (SELECT COUNT(*) FROM (SELECT 1 {} LIMIT ${cap}) u) AS total",
        filters.decisions_clause(),
        filters.records_clause(),
        cap = filters.parameters() + 1,
    );
    let counted: i64 = filters
        .bind(sqlx::query(&count), &caller.tenant_id)
        .bind(COUNT_LIMIT + 1)
        .fetch_one(pool)
        .await?
        .try_get("total")?;
    let evaluations = rows
        .iter()
        .map(evaluation_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(envelope::paged_counted(
        evaluations,
        page,
        counted.min(COUNT_LIMIT),
        counted > COUNT_LIMIT,
    ))
}

/// The filters a query gives, as SQL conditions on both kinds of decisions. Only the
/// filters given are written (`$1` is the tenant, then each given filter in the order
/// policy, agent, result), so each side's planner picks the index they match.
///
/// A decision matches when it is the agent's (if given) and its result set holds a
/// matching result (if a policy or result is given): the sets are few and small, so
/// that is a short list of set ids, and each side's newest matching decisions are read
/// through its time index (its agent's, with an agent) before their results are joined
/// and filtered.
struct Filters<'q> {
    policy_id: Option<i64>,
    agent_id: Option<&'q str>,
    result: Option<&'static str>,
}

impl<'q> Filters<'q> {
    fn of(query: &'q EvaluationQuery) -> Self {
        Filters {
            policy_id: query.policy_id,
            agent_id: query.agent_id.as_ref().map(Text::as_str),
            result: query.result.map(Outcome::as_str),
        }
    }

    /// How many parameters the conditions bind, the tenant included.
    fn parameters(&self) -> usize {
        1 + usize::from(self.policy_id.is_some())
            + usize::from(self.agent_id.is_some())
            + usize::from(self.result.is_some())
    }

    /// The parameter numbers of the policy, agent and result filters given.
    fn numbers(&self) -> (Option<usize>, Option<usize>, Option<usize>) {
        let policy = self.policy_id.map(|_| 2);
        let agent = self.agent_id.map(|_| 2 + usize::from(policy.is_some()));
        let result = self
            .result
            .map(|_| 2 + usize::from(policy.is_some()) + usize::from(agent.is_some()));
        (policy, agent, result)
    }

    /// Conditions on a decision of side `alias` (whose result set is `set_column`): its
    /// agent, and a result set holding a matching result.
    fn decision_conditions(&self, alias: &str, set_column: &str) -> String {
        let (policy, agent, result) = self.numbers();
        let mut conditions = String::new();
        if let Some(agent) = agent {
            conditions.push_str(&format!(" AND {alias}.agent_id = ${agent}"));
        }
        if policy.is_some() || result.is_some() {
            conditions.push_str(&format!(
                " AND {alias}.{set_column} IN (SELECT m.set_id FROM policy_result_set_members m \
                 WHERE m.tenant_id = $1{})",
                Self::result_conditions("m", policy, result)
            ));
        }
        conditions
    }

    /// Conditions on the joined results `alias`.
    fn result_conditions(alias: &str, policy: Option<usize>, result: Option<usize>) -> String {
        let mut conditions = String::new();
        if let Some(policy) = policy {
            conditions.push_str(&format!(" AND {alias}.policy_id = ${policy}"));
        }
        if let Some(result) = result {
            conditions.push_str(&format!(" AND {alias}.result = ${result}"));
        }
        conditions
    }

    /// One page of evaluation records, newest first; its last three parameters are the
    /// number of each side's newest matching decisions to read, the limit and the offset.
    fn page_query(&self) -> String {
        let (policy, _, result) = self.numbers();
        let next = self.parameters() + 1;
        let joined = Self::result_conditions("r", policy, result);
        format!(
            "SELECT d.id AS decision_id, r.position, r.policy_id, r.policy_name, r.policy_type, \
             r.result, r.reason, d.agent_id, d.provider, d.model, d.request_id, d.evaluated_at, \
             d.evaluated_at AS ended_at \
             FROM (SELECT d.* FROM policy_decisions d WHERE d.tenant_id = $1{decisions} \
             ORDER BY d.evaluated_at DESC, d.id DESC LIMIT ${next}) d \
             JOIN policy_result_set_members r ON r.set_id = d.result_set_id{where_joined} \
             UNION ALL \
             SELECT u.decision_id, r.position, r.policy_id, r.policy_name, r.policy_type, \
             r.result, r.reason, u.agent_id, u.model_provider, \
             COALESCE(u.requested_model, u.model_name), u.record_id, u.evaluated_at, \
             u.recorded_at \
             FROM (SELECT u.* FROM usage_records u \
             WHERE u.tenant_id = $1 AND u.decision_set_id IS NOT NULL{records} \
             ORDER BY u.recorded_at DESC, u.decision_id DESC LIMIT ${next}) u \
             JOIN policy_result_set_members r ON r.set_id = u.decision_set_id{where_joined} \
             ORDER BY ended_at DESC, decision_id DESC, position LIMIT ${} OFFSET ${}",
            next + 1,
            next + 2,
            decisions = self.decision_conditions("d", "result_set_id"),
            records = self.decision_conditions("u", "decision_set_id"),
            where_joined = Self::where_clause(&joined),
        )
    }

    /// ` WHERE ...` of `conditions` (each starting ` AND `), or nothing.
    fn where_clause(conditions: &str) -> String {
        conditions
            .strip_prefix(" AND ")
            .map_or_else(String::new, |first| format!(" WHERE {first}"))
    }

    /// `FROM ... WHERE ...` over `policy_decisions` as `d`, joined to the matching results
    /// as `r`, for counting.
    fn decisions_clause(&self) -> String {
        let (policy, _, result) = self.numbers();
        format!(
            "FROM policy_decisions d \
             JOIN policy_result_set_members r ON r.set_id = d.result_set_id \
             WHERE d.tenant_id = $1{}{}",
            self.decision_conditions("d", "result_set_id"),
            Self::result_conditions("r", policy, result)
        )
    }

    /// `FROM ... WHERE ...` over decided usage records as `u`, joined to the matching
    /// results as `r`, for counting. The explicit `IS NOT NULL` lets SQLite use the
    /// partial index of them.
    fn records_clause(&self) -> String {
        let (policy, _, result) = self.numbers();
        format!(
            "FROM usage_records u \
             JOIN policy_result_set_members r ON r.set_id = u.decision_set_id \
             WHERE u.tenant_id = $1 AND u.decision_set_id IS NOT NULL{}{}",
            self.decision_conditions("u", "decision_set_id"),
            Self::result_conditions("r", policy, result)
        )
    }

    /// Binds the tenant and the filters given, in the order `conditions` numbers them.
    fn bind<'a>(
        &self,
        mut query: sqlx::query::Query<'a, sqlx::Any, sqlx::any::AnyArguments<'a>>,
        tenant_id: &'a str,
    ) -> sqlx::query::Query<'a, sqlx::Any, sqlx::any::AnyArguments<'a>>
    where
        'q: 'a,
    {
        query = query.bind(tenant_id);
        if let Some(policy_id) = self.policy_id {
            query = query.bind(policy_id);
        }
        if let Some(agent_id) = self.agent_id {
            query = query.bind(agent_id);
        }
        if let Some(result) = self.result {
            query = query.bind(result);
        }
        query
    }
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
