//! Writing decisions: result sets shared by identical decisions, decision ids, the
//! `policy_decisions` rows of requests that were not forwarded, and the audit events of
//! failures.

use std::collections::HashMap;

use sqlx::Row;

use super::{DecisionRow, ReportedResult, ResultList};
use crate::db::bulk;
use crate::db::WriteTx;
use crate::validate::Text;

/// Bound values per decision row and per result set member.
const DECISION_COLUMNS: usize = 7;
const MEMBER_COLUMNS: usize = 8;

/// Writes `decisions` that were not forwarded (a forwarded request's decision is written
/// on its usage record, see `api::internal::usage_batches`): a `policy_decisions` row
/// each, pointing at the tenant's result set for its results, and a `policy.violated`
/// audit event per failure. Returns how many results were written. The caller has made
/// sure each decision is new: a decision batch is written once per batch id.
pub async fn record_evaluations(
    tx: &mut WriteTx,
    decisions: &[DecisionRow<'_>],
) -> Result<usize, sqlx::Error> {
    let sets = result_set_ids(tx, decisions.iter().map(|row| (row.tenant_id, row.list))).await?;
    let rows: Vec<(&DecisionRow<'_>, i64)> = decisions
        .iter()
        .filter_map(|row| Some((row, *sets.get(&(row.tenant_id, row.list.digest.as_str()))?)))
        .collect();
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
    let written: Vec<DecisionRow<'_>> = rows.into_iter().map(|(row, _)| *row).collect();
    super::violations::audit_violations(tx, &written).await
}

/// `count` new decision ids, from `policy_decisions`' own sequence: the ids of decisions
/// on usage records and of `policy_decisions` rows never meet.
pub async fn draw_decision_ids(tx: &mut WriteTx, count: usize) -> Result<Vec<i64>, sqlx::Error> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let wanted = i64::try_from(count).unwrap_or(i64::MAX);
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

/// The result set id of every `(tenant, results)` given, by tenant and digest, creating
/// (with their members) the sets not seen before. Another replica may create the same
/// set at the same time: the unique digest decides, and the loser reads the winner's id.
pub async fn result_set_ids<'a>(
    tx: &mut WriteTx,
    decisions: impl Iterator<Item = (&'a str, &'a ResultList)>,
) -> Result<HashMap<(&'a str, &'a str), i64>, sqlx::Error> {
    // Each distinct set once, with its results. A batch's decisions mostly repeat the one
    // before: those skip the hashing.
    let mut wanted: HashMap<(&str, &str), &ResultList> = HashMap::new();
    let mut previous: Option<(&str, &ResultList)> = None;
    for (tenant_id, list) in decisions {
        if previous.is_some_and(|(tenant, last)| tenant == tenant_id && std::ptr::eq(last, list)) {
            continue;
        }
        previous = Some((tenant_id, list));
        wanted
            .entry((tenant_id, list.digest.as_str()))
            .or_insert(list);
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
    Ok(created)
}
