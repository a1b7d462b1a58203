//! Writing decisions: result sets shared by identical decisions, decision ids, the
//! `policy_decisions` rows of requests that were not forwarded, and the audit events of
//! failures.

use std::collections::HashMap;

use super::store;
use super::{DecisionRow, ReportedResult, ResultList};
use crate::db::WriteTx;

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
    store::insert_decisions(tx, &rows).await?;
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
    store::take_decision_ids(tx, wanted).await
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
            store::find_result_sets(tx, &missing).await?
        };
        for ((tenant_id, digest), id) in ids {
            if let Ok(at) = keys.binary_search_by(|k| k.cmp(&(&tenant_id, &digest))) {
                found.insert(keys[at], id);
            }
        }
    }
    Ok(found)
}

/// Creates the sets of `keys` not created meanwhile by another writer, with their
/// members; returns the ids of those it created.
async fn create_sets(
    tx: &mut WriteTx,
    keys: &[(&str, &str)],
    wanted: &HashMap<(&str, &str), &ResultList>,
) -> Result<Vec<((String, String), i64)>, sqlx::Error> {
    let created = store::insert_result_sets(tx, keys).await?;
    let mut members: Vec<(i64, &str, i64, &ReportedResult)> = Vec::new();
    for ((tenant_id, digest), set_id) in &created {
        let Some(list) = wanted.get(&(tenant_id.as_str(), digest.as_str())) else {
            continue;
        };
        for (position, result) in (0..).zip(&list.results) {
            members.push((*set_id, tenant_id, position, result));
        }
    }
    store::insert_result_set_members(tx, &members).await?;
    Ok(created)
}
