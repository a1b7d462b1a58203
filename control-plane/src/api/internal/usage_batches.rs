//! `POST /internal/v1/usage-batches`: the proxy's usage, idempotent by record id. A
//! forwarded request's policy decision rides on its record and is written on it, as
//! columns of the same row (migration 0019).
//!
//! The proxy retries a batch until it is acknowledged, so the same records may arrive
//! more than once. Each record carries an id that is unique within its tenant; a record
//! whose id was ingested before is counted as a duplicate and changes nothing. The whole
//! batch is one transaction: either every new record lands with its rollup or none does.

use std::collections::BTreeSet;

use warden_shared::timestamp::Timestamp;

use super::input::{ParsedBatch, ProxyUsageRecord, RecordEvaluation};
use super::store;
use super::tool_calls::record_tool_calls;
use super::BatchAck;
use crate::api::payload_capture::{record_captures, RecordCapture};
use crate::api::policies::{
    audit_violations, draw_decision_ids, result_set_ids, DecisionRow, ResultList, ResultLists,
};
use crate::api::telemetry::{item_error, usage_entry, ItemError, UsageInput};
use crate::db::WriteTx;
use crate::error::{ApiError, ApiResult};
use crate::ledger::{self, EntryDecision, Outcome, UsageEntry, UsageSource};
use crate::state::AppState;
use crate::validate::Text;

/// The largest batch the proxy may send.
pub const MAX_RECORDS: usize = 1000;
/// The largest batch body, in bytes: records with captured payloads are large.
pub const MAX_BATCH_BYTES: usize = 16 << 20;
/// How far in the future a record's time may be (clock skew between machines).
const MAX_SKEW_MS: i64 = 300_000;

/// Writes the batch's new records, with their decisions and rollups, in one transaction;
/// a record seen before is a duplicate, a bad one is reported by index.
pub async fn ingest_usage_batch(state: &AppState, batch: ParsedBatch) -> ApiResult<BatchAck> {
    if batch.records.len() > MAX_RECORDS {
        return Err(ApiError::validation(
            "records",
            format!("records: at most {MAX_RECORDS} per batch"),
        ));
    }
    let now = state.clock.now();
    let mut ack = BatchAck {
        batch_id: batch.batch_id.as_str().to_owned(),
        accepted: 0,
        duplicates: 0,
        rejected: 0,
        dropped: 0,
        errors: Vec::new(),
        spend: Vec::new(),
    };
    let mut lists = ResultLists::new(&batch.result_lists);
    let (parsed, tool_calls) = check_records(batch.records, &mut lists, now, &mut ack.errors);
    let mut tx = state.db.begin_write().await?;
    // A tenant deleted while its usage was on its way: its records are dropped (no row
    // may name it), the rest of the batch lands.
    let live = store::live_tenants(
        &mut tx,
        parsed
            .iter()
            .map(|(_, (keys, _), _)| keys.tenant_id.as_str())
            .chain(tool_calls.iter().map(|record| record.tenant_id.as_str())),
    )
    .await?;
    let (parsed, gone_usage) = keep_live(parsed, |(_, (keys, _), _)| &keys.tenant_id, &live);
    let (tool_calls, gone_calls) = keep_live(tool_calls, |record| &record.tenant_id, &live);
    report_dropped(state, &ack.batch_id, "usage", &gone_usage);
    report_dropped(state, &ack.batch_id, "tool_call", &gone_calls);
    ack.dropped = count(gone_usage.len() + gone_calls.len());
    let mut entries = Vec::with_capacity(parsed.len());
    let mut indexes = Vec::with_capacity(parsed.len());
    let mut decided = Vec::with_capacity(parsed.len());
    let mut captures = Vec::with_capacity(parsed.len());
    for (index, (keys, input), list) in &parsed {
        match usage_entry(
            &state.providers,
            &keys.tenant_id,
            input,
            keys.recorded_at,
            UsageSource::Proxy,
            Some(keys.record_id.as_str()),
        ) {
            Ok(mut entry) => {
                entry.api_key_id = keys.api_key_id.as_ref().map(|id| id.as_str());
                entries.push(entry);
                indexes.push(*index);
                let evaluation = keys.evaluation.as_ref().zip(*list);
                decided.push(evaluation.map(|(evaluation, list)| (evaluation, lists.get(list))));
                captures.push(keys.capture.as_ref());
            }
            Err(error) => ack.errors.push(item_error(*index, error)),
        }
    }
    let calls: Vec<&ProxyUsageRecord> = tool_calls.iter().collect();
    let new_calls = record_tool_calls(&mut tx, &calls).await?;
    ack.accepted += new_calls;
    ack.duplicates += count(calls.len()) - new_calls;
    place_decisions(&mut tx, &mut entries, &decided).await?;
    let recorded = ledger::record_batch(&mut tx, batch.batch_id.as_str(), &entries, now).await?;
    ack.spend = recorded.spend;
    let written = new_decisions(&entries, &decided, &recorded.outcomes);
    audit_violations(&mut tx, &written).await?;
    record_captures(&mut tx, &entries, &captures, &recorded.outcomes).await?;
    count_outcomes(&mut ack, indexes, recorded.outcomes);
    ack.errors.sort_by_key(|error| error.index);
    tx.commit().await?;
    ack.rejected = count(ack.errors.len());
    Ok(ack)
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Splits `items` into those whose tenant is in `live` and the tenant ids of the others
/// (one per item dropped).
pub(super) fn keep_live<T>(
    items: Vec<T>,
    tenant_of: impl Fn(&T) -> &String,
    live: &BTreeSet<String>,
) -> (Vec<T>, Vec<String>) {
    let mut gone = Vec::new();
    let kept = items
        .into_iter()
        .filter(|item| {
            let tenant_id = tenant_of(item);
            let alive = live.contains(tenant_id);
            if !alive {
                gone.push(tenant_id.clone());
            }
            alive
        })
        .collect();
    (kept, gone)
}

/// Counts and logs (one line per batch and kind) the records of deleted tenants.
pub(super) fn report_dropped(state: &AppState, batch_id: &str, kind: &str, gone: &[String]) {
    if gone.is_empty() {
        return;
    }
    state
        .metrics
        .count_ingest_dropped(kind, "tenant_deleted", gone.len());
    let tenants: BTreeSet<&str> = gone.iter().map(String::as_str).collect();
    tracing::warn!(
        %batch_id,
        kind,
        dropped = gone.len(),
        tenants = ?tenants,
        "records of deleted tenants dropped (counted in warden_ingest_records_dropped_total)"
    );
}

/// A record that passed the checks of its own: its index in the batch, its keys and
/// usage, and the index of its decision's results list in the batch's [`ResultLists`].
type CheckedRecord = (usize, (RecordKeys, UsageInput), Option<usize>);

/// The records that parse, lie no further in the future than [`MAX_SKEW_MS`] and carry
/// well-formed results (usage, and tool calls apart); the others go to `errors`.
fn check_records(
    records: Vec<ApiResult<ProxyUsageRecord>>,
    lists: &mut ResultLists<'_>,
    now: Timestamp,
    errors: &mut Vec<ItemError>,
) -> (Vec<CheckedRecord>, Vec<ProxyUsageRecord>) {
    let mut parsed = Vec::new();
    let mut tool_calls = Vec::new();
    for (index, record) in records.into_iter().enumerate() {
        let record = match record.and_then(|r| check_time(r, now)) {
            Ok(record) => record,
            Err(error) => {
                errors.push(item_error(index, error));
                continue;
            }
        };
        if record.tool_call.is_some() {
            tool_calls.push(record);
            continue;
        }
        let list = match &record.evaluation {
            Some(evaluation) => match lists.of(&evaluation.results, "evaluation.results") {
                Ok(list) => Some(list),
                Err(error) => {
                    errors.push(ItemError { index, ..error });
                    continue;
                }
            },
            None => None,
        };
        parsed.push((index, record.into_input(), list));
    }
    (parsed, tool_calls)
}

/// The decisions of the records new to the ledger, whose failures are to be audited: a
/// resent record's were audited with it the first time.
fn new_decisions<'a>(
    entries: &[UsageEntry<'a>],
    decided: &[Option<(&'a RecordEvaluation, &'a ResultList)>],
    outcomes: &[Outcome],
) -> Vec<DecisionRow<'a>> {
    entries
        .iter()
        .zip(decided)
        .zip(outcomes)
        .filter(|(_, outcome)| matches!(outcome, Outcome::Recorded { .. }))
        .filter_map(|((entry, decision), _)| {
            let (evaluation, list) = (*decision)?;
            Some(DecisionRow {
                tenant_id: entry.tenant_id,
                request_id: entry.idempotency_key?,
                agent_id: entry.agent_id,
                provider: entry.provider,
                model: evaluation.model.as_str(),
                evaluated_at: evaluation.evaluated_at,
                list,
            })
        })
        .collect()
}

/// Counts the ledger's outcomes into the acknowledgement; a record of an agent the
/// tenant does not have is reported at its index.
fn count_outcomes(ack: &mut BatchAck, indexes: Vec<usize>, outcomes: Vec<Outcome>) {
    for (index, outcome) in indexes.into_iter().zip(outcomes) {
        match outcome {
            Outcome::Recorded { .. } => ack.accepted += 1,
            Outcome::Duplicate => ack.duplicates += 1,
            Outcome::UnknownAgent => ack.errors.push(ItemError {
                index,
                field: Some("agent_id".to_owned()),
                message: "agent_id: no such agent in that tenant".to_owned(),
            }),
        }
    }
}

/// Puts each decided entry's decision on it: the result set of its results (created the
/// first time they are seen) and an id of its own. An entry that turns out to be a resend
/// leaves its id unused.
async fn place_decisions<'a>(
    tx: &mut WriteTx,
    entries: &mut [UsageEntry<'a>],
    decided: &[Option<(&'a RecordEvaluation, &'a ResultList)>],
) -> Result<(), sqlx::Error> {
    let sets = result_set_ids(
        tx,
        entries
            .iter()
            .zip(decided)
            .filter_map(|(entry, decision)| Some((entry.tenant_id, decision.as_ref()?.1))),
    )
    .await?;
    let mut ids = draw_decision_ids(tx, decided.iter().flatten().count())
        .await?
        .into_iter();
    for (entry, decision) in entries.iter_mut().zip(decided) {
        let Some((evaluation, list)) = decision else {
            continue;
        };
        let (Some(set_id), Some(id)) = (
            sets.get(&(entry.tenant_id, list.digest.as_str())),
            ids.next(),
        ) else {
            continue;
        };
        let requested = evaluation.model.as_str();
        entry.decision = Some(EntryDecision {
            id,
            set_id: *set_id,
            evaluated_at: evaluation.evaluated_at,
            requested_model: (requested != entry.model_name).then_some(requested),
        });
    }
    Ok(())
}

/// Where a record belongs and its idempotency key, apart from the usage itself.
struct RecordKeys {
    record_id: Text<1, 100>,
    tenant_id: String,
    recorded_at: Timestamp,
    api_key_id: Option<Text<1, 100>>,
    evaluation: Option<RecordEvaluation>,
    capture: Option<RecordCapture>,
}

impl ProxyUsageRecord {
    fn into_input(self) -> (RecordKeys, UsageInput) {
        (
            RecordKeys {
                record_id: self.record_id,
                tenant_id: self.tenant_id,
                recorded_at: self.recorded_at,
                api_key_id: self.api_key_id,
                evaluation: self.evaluation,
                capture: self.capture,
            },
            UsageInput {
                agent_id: self.agent_id,
                model_provider: self.model_provider,
                model_name: self.model_name,
                input_tokens: self.input_tokens,
                output_tokens: self.output_tokens,
                request_type: self.request_type,
                cost_usd: self.cost_usd,
            },
        )
    }
}

fn check_time(record: ProxyUsageRecord, now: Timestamp) -> ApiResult<ProxyUsageRecord> {
    if record.recorded_at.as_millis() > now.as_millis() + MAX_SKEW_MS {
        return Err(ApiError::validation(
            "recorded_at",
            "recorded_at: lies more than five minutes in the future",
        ));
    }
    Ok(record)
}
