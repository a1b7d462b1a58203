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

use serde_json::value::RawValue;
use warden_shared::timestamp::Timestamp;

use super::input::{DecisionBatch, ProxyDecision};
use super::usage_batches::report_dropped;
use super::{store, DecisionAck, QueuedApproval};
use crate::api::approvals::{
    record_lapsed, record_requested, store as approvals, APPROVAL_TTL_MS, DENIAL_HOLD_MS,
};
use crate::api::extract::parse_raw;
use crate::api::policies::{record_evaluations, DecisionRow, ResultLists};
use crate::api::telemetry::{item_error, ItemError};
use crate::db::{Db, WriteTx};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// The most decisions one batch may carry.
pub const MAX_DECISIONS: usize = 1000;

/// How long a decision batch's id is remembered: far longer than a proxy retries a batch
/// (every 15 s at most, until answered).
pub const BATCH_ID_RETENTION_MS: i64 = 7 * 24 * 3_600_000;

/// A decision whose agent exists, with its agent's team and the index of its results
/// list in the batch's [`ResultLists`].
struct Placed {
    index: usize,
    decision: ProxyDecision,
    team_id: Option<String>,
    list: usize,
}

/// Writes a batch seen for the first time (its evaluation records and the approvals to
/// queue) in one transaction; a batch seen before writes nothing. Either way the
/// decisions that cannot be placed are reported by index.
pub async fn ingest_policy_decisions(
    state: &AppState,
    batch: DecisionBatch,
) -> ApiResult<DecisionAck> {
    check_size(&batch)?;
    let now = state.clock.now();
    let mut ack = DecisionAck {
        batch_id: batch.batch_id.as_str().to_owned(),
        evaluations_written: 0,
        approvals_created: 0,
        approvals: Vec::new(),
        rejected: 0,
        dropped: 0,
        errors: Vec::new(),
    };
    let mut tx = state.db.begin_write().await?;
    // The batch id is the idempotency key: the proxy resends the very same batch until
    // it is acknowledged, and a batch seen before writes nothing (its errors are still
    // reported). Under concurrent resends on PostgreSQL, the second waits on the key.
    let first_time = store::claim_decision_batch(&mut tx, batch.batch_id.as_str(), now).await?;
    let mut lists = ResultLists::new(&batch.result_lists);
    let mut gone = Vec::new();
    let placed = place_decisions(
        &mut tx,
        batch.decisions,
        &mut lists,
        &mut ack.errors,
        &mut gone,
    )
    .await?;
    report_dropped(state, &ack.batch_id, "decision", &gone);
    ack.dropped = gone.len();
    if first_time {
        ack.evaluations_written =
            record_evaluations(&mut tx, &evaluation_rows(&placed, &lists)).await?;
    }
    queue_approvals(&mut tx, &placed, first_time, now, &mut ack).await?;
    ack.errors.sort_by_key(|error| error.index);
    tx.commit().await?;
    ack.rejected = ack.errors.len();
    Ok(ack)
}

fn check_size(batch: &DecisionBatch) -> ApiResult<()> {
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
    Ok(())
}

/// Parses each decision and finds its results list and its agent's team; a decision
/// that does not parse, whose results are malformed or whose agent the tenant does not
/// have goes to `errors` instead, and one whose tenant was deleted meanwhile to `gone`
/// (its tenant's id).
async fn place_decisions(
    tx: &mut WriteTx,
    decisions: Vec<Box<RawValue>>,
    lists: &mut ResultLists<'_>,
    errors: &mut Vec<ItemError>,
    gone: &mut Vec<String>,
) -> ApiResult<Vec<Placed>> {
    // A batch is mostly a few agents' requests: each agent is looked up once.
    let mut teams: HashMap<(String, String), Option<Option<String>>> = HashMap::new();
    let mut tenants: HashMap<String, bool> = HashMap::new();
    let mut placed = Vec::new();
    for (index, raw) in decisions.into_iter().enumerate() {
        let decision = match parse_raw::<ProxyDecision>(&raw) {
            Ok(decision) => decision,
            Err(error) => {
                errors.push(item_error(index, error));
                continue;
            }
        };
        let list = match lists.of(&decision.evaluation.results, "evaluation.results") {
            Ok(list) => list,
            Err(error) => {
                errors.push(ItemError { index, ..error });
                continue;
            }
        };
        let tenant_id = decision.tenant_id.as_str();
        let live = match tenants.get(tenant_id) {
            Some(live) => *live,
            None => {
                let live = !store::live_tenants(tx, [tenant_id]).await?.is_empty();
                tenants.insert(tenant_id.to_owned(), live);
                live
            }
        };
        if !live {
            gone.push(tenant_id.to_owned());
            continue;
        }
        let key = (
            decision.tenant_id.as_str().to_owned(),
            decision.evaluation.agent_id.as_str().to_owned(),
        );
        let team_id = match teams.get(&key) {
            Some(found) => found.clone(),
            None => {
                let found = store::agent_team(tx, &key.0, &key.1).await?;
                teams.insert(key, found.clone());
                found
            }
        };
        let Some(team_id) = team_id else {
            errors.push(item_error(
                index,
                ApiError::validation(
                    "evaluation.agent_id",
                    "agent_id: no such agent in the tenant",
                ),
            ));
            continue;
        };
        placed.push(Placed {
            index,
            decision,
            team_id,
            list,
        });
    }
    Ok(placed)
}

/// The evaluation records of the placed decisions; a request reported twice in one
/// batch counts once.
fn evaluation_rows<'a>(placed: &'a [Placed], lists: &'a ResultLists<'_>) -> Vec<DecisionRow<'a>> {
    let mut seen = HashSet::new();
    placed
        .iter()
        .filter(|item| {
            seen.insert((
                item.decision.tenant_id.as_str(),
                item.decision.evaluation.request_id.as_str(),
            ))
        })
        .map(|item| {
            let report = &item.decision.evaluation;
            DecisionRow {
                tenant_id: item.decision.tenant_id.as_str(),
                request_id: report.request_id.as_str(),
                agent_id: report.agent_id.as_str(),
                provider: report.provider,
                model: report.model.as_str(),
                evaluated_at: report.evaluated_at,
                list: lists.get(item.list),
            }
        })
        .collect()
}

/// Queues the approvals the placed decisions ask for, when the batch is new; an ask
/// naming a policy the tenant does not have, or without an object for its context, is
/// reported either way.
async fn queue_approvals(
    tx: &mut WriteTx,
    placed: &[Placed],
    first_time: bool,
    now: Timestamp,
    ack: &mut DecisionAck,
) -> Result<(), sqlx::Error> {
    for item in placed {
        let Some(ask) = &item.decision.approval else {
            continue;
        };
        let tenant_id = item.decision.tenant_id.as_str();
        let policy_exists = store::policy_exists(tx, tenant_id, ask.policy_id).await?;
        let releases = ask.releases.unwrap_or_default();
        let digest_ok = match &ask.action_digest {
            Some(digest) => warden_shared::action::is_digest(digest),
            None => !releases.is_bound_to_action(),
        };
        if !digest_ok {
            ack.errors.push(item_error(
                item.index,
                ApiError::validation(
                    "approval.action_digest",
                    "approval.action_digest: 64 hex digits, required when the approval releases the action",
                ),
            ));
            continue;
        }
        if !policy_exists || !ask.request_context.is_object() {
            ack.errors.push(item_error(
                item.index,
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
        let report = &item.decision.evaluation;
        let request = approvals::Request {
            tenant_id,
            policy_id: ask.policy_id,
            agent_id: report.agent_id.as_str(),
            team_id: item.team_id.as_deref(),
            provider: report.provider.as_str(),
            model: report.model.as_str(),
            request_context: &ask.request_context,
            releases,
            action_digest: ask.action_digest.as_deref(),
        };
        let requested =
            approvals::request(tx, &request, now, APPROVAL_TTL_MS, DENIAL_HOLD_MS).await?;
        record_lapsed(tx, &requested.lapsed, now).await?;
        if let Some(approval_id) = requested.pending {
            ack.approvals.push(QueuedApproval {
                index: item.index,
                approval_id,
            });
        }
        if let Some(id) = requested.created {
            record_requested(tx, &request, id, now).await?;
            ack.approvals_created += 1;
        }
    }
    Ok(())
}

/// Forgets the ids of decision batches received before `before_ms`; returns how many.
pub async fn forget_batches_before(db: &Db, before_ms: i64) -> Result<u64, sqlx::Error> {
    let mut tx = db.begin_write().await?;
    let forgotten = store::forget_decision_batches_before(&mut tx, before_ms).await?;
    tx.commit().await?;
    Ok(forgotten)
}
