//! SQL of evaluation records: result sets and their members, `policy_decisions` rows and
//! their ids, the minutes of repeated violations, and the list that reads decisions of
//! both kinds. Every statement on a tenant's rows filters by tenant, but the background
//! round's [`take_violation_minutes`] of every tenant.
//!
//! Multi-row statements and the list's filters are assembled here from fixed fragments,
//! placeholders and counts only; every value is a bound parameter.

use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::Query;
use sqlx::{Any, AnyPool, Row};
use warden_shared::timestamp::Timestamp;

use super::{DecisionRow, PolicyEvaluation, ReportedResult, POSITIONS_PER_DECISION};
use crate::api::envelope::Page;
use crate::db::{bulk, WriteTx};
use crate::validate::Text;

/// Bound values per decision row and per result set member.
const DECISION_COLUMNS: usize = 7;
const MEMBER_COLUMNS: usize = 8;

/// Inserts a `policy_decisions` row per `(decision, result set id)`, as many per
/// statement as the backend takes parameters.
pub async fn insert_decisions(
    tx: &mut WriteTx,
    rows: &[(&DecisionRow<'_>, i64)],
) -> Result<(), sqlx::Error> {
    for chunk in rows.chunks(bulk::rows_per_statement(tx, DECISION_COLUMNS)) {
        let values = bulk::placeholders(tx, chunk.len(), DECISION_COLUMNS, 1);
        let sql = bulk::for_backend(
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
    Ok(())
}

/// `wanted` (at least 1) new ids from `policy_decisions`' own sequence, in order.
pub async fn take_decision_ids(tx: &mut WriteTx, wanted: i64) -> Result<Vec<i64>, sqlx::Error> {
    if bulk::is_postgres(tx) {
        return sqlx::query_scalar(
            "SELECT nextval(pg_get_serial_sequence('policy_decisions', 'id')) \
             FROM generate_series(1, $1)",
        )
        .bind(wanted)
        .fetch_all(&mut **tx)
        .await;
    }
    // SQLite gives an AUTOINCREMENT row an id above both the table's largest and this
    // sequence value, so ids taken by raising it are never handed out again. Migration
    // 0019 creates the row; it is made here too should it ever be missing.
    let last: Option<i64> = sqlx::query_scalar(
        "UPDATE sqlite_sequence SET seq = seq + $1 WHERE name = 'policy_decisions' RETURNING seq",
    )
    .bind(wanted)
    .fetch_optional(&mut **tx)
    .await?;
    let last = match last {
        Some(last) => last,
        None => {
            sqlx::query_scalar(
                "INSERT INTO sqlite_sequence (name, seq) \
                 SELECT 'policy_decisions', COALESCE(MAX(id), 0) + $1 FROM policy_decisions \
                 RETURNING seq",
            )
            .bind(wanted)
            .fetch_one(&mut **tx)
            .await?
        }
    };
    Ok((last - wanted + 1..=last).collect())
}

/// The ids of the existing result sets among `keys` (`(tenant, digest)` pairs), each
/// with its key.
pub async fn find_result_sets(
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

/// Creates the result sets of `keys` (`(tenant, digest)` pairs) that do not exist yet,
/// without members; returns the ids of those it created, each with its key. A set
/// created meanwhile by another writer is skipped, not an error.
pub async fn insert_result_sets(
    tx: &mut WriteTx,
    keys: &[(&str, &str)],
) -> Result<Vec<((String, String), i64)>, sqlx::Error> {
    set_ids(tx, keys, |pairs| {
        format!(
            "INSERT INTO policy_result_sets (tenant_id, digest) VALUES {pairs} \
             ON CONFLICT (tenant_id, digest) DO NOTHING RETURNING id, tenant_id, digest"
        )
    })
    .await
}

/// Inserts result set members, each `(set id, tenant, position, result)`.
pub async fn insert_result_set_members(
    tx: &mut WriteTx,
    members: &[(i64, &str, i64, &ReportedResult)],
) -> Result<(), sqlx::Error> {
    for chunk in members.chunks(bulk::rows_per_statement(tx, MEMBER_COLUMNS)) {
        let values = bulk::placeholders(tx, chunk.len(), MEMBER_COLUMNS, 1);
        let sql = bulk::for_backend(
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
    Ok(())
}

/// Set ids by `(tenant, digest)`: `sql` holds `{}` where the pairs' placeholders go and
/// returns `id, tenant_id, digest`.
async fn set_ids(
    tx: &mut WriteTx,
    keys: &[(&str, &str)],
    sql: fn(&str) -> String,
) -> Result<Vec<((String, String), i64)>, sqlx::Error> {
    let mut ids = Vec::new();
    for chunk in keys.chunks(bulk::rows_per_statement(tx, 2)) {
        let values = bulk::placeholders(tx, chunk.len(), 2, 1);
        let sql = bulk::for_backend(tx, sql(&values));
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

/// Opens the agent's and policy's row of `minute` (Unix ms) with no repeats and
/// `details`; false when the minute had its row already (this refusal is a repeat).
pub async fn open_violation_minute(
    tx: &mut WriteTx,
    tenant_id: &str,
    agent_id: &str,
    policy_id: i64,
    minute: i64,
    details: &str,
) -> Result<bool, sqlx::Error> {
    let inserted = sqlx::query(
        "INSERT INTO policy_violation_minutes \
         (tenant_id, agent_id, policy_id, minute, repeats, last_details) \
         VALUES ($1, $2, $3, $4, 0, $5) ON CONFLICT DO NOTHING",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .bind(policy_id)
    .bind(minute)
    .bind(details)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    Ok(inserted == 1)
}

/// Counts one more repeat in the agent's and policy's row of `minute`, and keeps
/// `details` as the newest.
pub async fn count_violation_repeat(
    tx: &mut WriteTx,
    tenant_id: &str,
    agent_id: &str,
    policy_id: i64,
    minute: i64,
    details: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE policy_violation_minutes SET repeats = repeats + 1, last_details = $5 \
         WHERE tenant_id = $1 AND agent_id = $2 AND policy_id = $3 AND minute = $4",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .bind(policy_id)
    .bind(minute)
    .bind(details)
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

/// A minute of an agent's refusals by one policy, as taken for its summary.
pub struct ViolationMinute {
    pub tenant_id: String,
    pub policy_id: i64,
    /// The minute's start, Unix ms.
    pub minute: i64,
    /// The refusals after the minute's first.
    pub repeats: i64,
    /// The newest refusal's audit details, as JSON text.
    pub last_details: String,
}

/// Deletes the minutes that start before `before` (Unix ms) and returns them: of every
/// tenant (the background round), or of `tenant_id` alone. Taking rows with the delete
/// that removes them lets replicas do this at once without taking a row twice.
pub async fn take_violation_minutes(
    tx: &mut WriteTx,
    before: i64,
    tenant_id: Option<&str>,
) -> Result<Vec<ViolationMinute>, sqlx::Error> {
    let taken = match tenant_id {
        None => sqlx::query(concat!(
            "DELETE FROM policy_violation_minutes WHERE minute < $1 ",
            "RETURNING tenant_id, agent_id, policy_id, minute, repeats, last_details"
        ))
        .bind(before),
        Some(tenant_id) => sqlx::query(concat!(
            "DELETE FROM policy_violation_minutes WHERE minute < $1 AND tenant_id = $2 ",
            "RETURNING tenant_id, agent_id, policy_id, minute, repeats, last_details"
        ))
        .bind(before)
        .bind(tenant_id),
    };
    taken
        .fetch_all(&mut **tx)
        .await?
        .iter()
        .map(|row| {
            Ok(ViolationMinute {
                tenant_id: row.try_get("tenant_id")?,
                policy_id: row.try_get("policy_id")?,
                minute: row.try_get("minute")?,
                repeats: row.try_get("repeats")?,
                last_details: row.try_get("last_details")?,
            })
        })
        .collect()
}

/// One page of the tenant's evaluation records matching `filters`, newest first by when
/// the request ended, then by decision and by the results' order within one.
pub async fn evaluations_page(
    pool: &AnyPool,
    tenant_id: &str,
    filters: &Filters<'_>,
    page: Page,
) -> Result<Vec<PolicyEvaluation>, sqlx::Error> {
    let sql = filters.page_query();
    // Each side's newest matching decisions that can reach this page: a page's rows come
    // from at most offset + limit decisions, each of one side or the other.
    filters
        .bind(sqlx::query(&sql), tenant_id)
        .bind(page.offset() + page.limit)
        .bind(page.limit)
        .bind(page.offset())
        .fetch_all(pool)
        .await?
        .iter()
        .map(evaluation_from_row)
        .collect()
}

/// How many of the tenant's evaluation records match `filters`, each kind of decision
/// counted up to `cap` (so the sum reaches at most twice that).
pub async fn count_evaluations(
    pool: &AnyPool,
    tenant_id: &str,
    filters: &Filters<'_>,
    cap: i64,
) -> Result<i64, sqlx::Error> {
    let sql = format!(
        "SELECT (SELECT COUNT(*) FROM (SELECT 1 {} LIMIT ${cap}) d) \
         + (SELECT COUNT(*) FROM (SELECT 1 {} LIMIT ${cap}) u) AS total",
        filters.decisions_clause(),
        filters.records_clause(),
        cap = filters.parameters() + 1,
    );
    filters
        .bind(sqlx::query(&sql), tenant_id)
        .bind(cap)
        .fetch_one(pool)
        .await?
        .try_get("total")
}

/// The filters of a list, as SQL conditions on both kinds of decisions. Only the
/// filters given are written (`$1` is the tenant, then each given filter in the order
/// policy, agent, result), so each side's planner picks the index they match.
///
/// A decision matches when it is the agent's (if given) and its result set holds a
/// matching result (if a policy or result is given): the sets are few and small, so
/// that is a short list of set ids, and each side's newest matching decisions are read
/// through its time index (its agent's, with an agent) before their results are joined
/// and filtered.
pub struct Filters<'q> {
    pub policy_id: Option<i64>,
    pub agent_id: Option<&'q str>,
    /// `pass`, `fail` or `skip`.
    pub result: Option<&'static str>,
}

impl<'q> Filters<'q> {
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
        mut query: Query<'a, Any, AnyArguments<'a>>,
        tenant_id: &'a str,
    ) -> Query<'a, Any, AnyArguments<'a>>
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
