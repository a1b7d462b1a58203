//! `POST /internal/v1/usage-batches`: the proxy's usage, idempotent by record id. A
//! forwarded request's policy decision rides on its record and is written on it, as
//! columns of the same row (migration 0019).
//!
//! The proxy retries a batch until it is acknowledged, so the same records may arrive
//! more than once. Each record carries an id that is unique within its tenant; a record
//! whose id was ingested before is counted as a duplicate and changes nothing. The whole
//! batch is one transaction: either every new record lands with its rollup or none does.

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;
use warden_shared::registry::Provider;
use warden_shared::snapshot::ScopeSpend;
use warden_shared::timestamp::Timestamp;

use super::ServiceCaller;
use crate::api::envelope::{self, Envelope};
use crate::api::extract::{parse_json, parse_raw, JsonBytes};
use crate::api::policies::{
    audit_violations, draw_decision_ids, result_set_ids, DecisionRow, ReportedResult, ResultList,
    ResultLists,
};
use crate::api::telemetry::{usage_entry, ItemError, UsageInput};
use crate::api::validate::Text;
use crate::db::WriteTx;
use crate::error::{ApiError, ApiResult};
use crate::ledger::{self, EntryDecision, Outcome, UsageEntry, UsageSource};
use crate::state::AppState;

/// The largest batch the proxy may send.
pub const MAX_RECORDS: usize = 1000;
/// How far in the future a record's time may be (clock skew between machines).
const MAX_SKEW_MS: i64 = 300_000;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageBatch {
    pub batch_id: Text<1, 100>,
    /// Results lists the records' decisions share: an `evaluation.results` is the index
    /// of its list here (or the list itself). A batch's requests mostly came out alike.
    #[serde(default)]
    #[schema(value_type = Vec<Vec<ReportedResult>>)]
    pub result_lists: Vec<Box<RawValue>>,
    #[schema(value_type = Vec<ProxyUsageRecord>)]
    pub records: Vec<Box<RawValue>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProxyUsageRecord {
    /// Unique within the tenant; the idempotency key.
    pub record_id: Text<1, 100>,
    pub tenant_id: String,
    pub agent_id: String,
    #[schema(value_type = String)]
    pub model_provider: Provider,
    pub model_name: Text<1, 200>,
    #[serde(default)]
    pub request_type: Option<Text<1, 64>>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    #[serde(default)]
    pub cost_usd: Option<f64>,
    #[schema(value_type = String, format = DateTime)]
    pub recorded_at: Timestamp,
    /// The proxy key the request came with; its budget counts the record.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub api_key_id: Option<Text<1, 100>>,
    /// The policies' decision on the request, when its tenant has enabled policies: it
    /// is written with the record, once, as the evaluation records of request
    /// `record_id`.
    #[serde(default)]
    pub evaluation: Option<RecordEvaluation>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordEvaluation {
    /// The model as the agent asked for it (`model_name` is the provider's).
    pub model: Text<1, 200>,
    #[schema(value_type = String, format = DateTime)]
    pub evaluated_at: Timestamp,
    /// The results in the policies' order, or the index of their list in the batch's
    /// `result_lists`.
    #[schema(value_type = Object)]
    pub results: Box<RawValue>,
}

/// A [`UsageBatch`] whose records all parse, in one pass: the proxy's batches, nearly
/// always. Scanning each record into a `RawValue` first, to parse it on its own, cost as
/// much again; that path is taken only when this one fails, to report the bad records
/// by index while the rest land.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TypedBatch {
    batch_id: Text<1, 100>,
    #[serde(default)]
    result_lists: Vec<Box<RawValue>>,
    records: Vec<ProxyUsageRecord>,
}

/// A batch with each record parsed, or the reason it does not parse.
struct ParsedBatch {
    batch_id: Text<1, 100>,
    result_lists: Vec<Box<RawValue>>,
    records: Vec<ApiResult<ProxyUsageRecord>>,
}

impl ParsedBatch {
    fn parse(body: &[u8]) -> ApiResult<ParsedBatch> {
        if let Ok(typed) = serde_json::from_slice::<TypedBatch>(body) {
            return Ok(ParsedBatch {
                batch_id: typed.batch_id,
                result_lists: typed.result_lists,
                records: typed.records.into_iter().map(Ok).collect(),
            });
        }
        let batch: UsageBatch = parse_json(body)?;
        Ok(ParsedBatch {
            batch_id: batch.batch_id,
            result_lists: batch.result_lists,
            records: batch.records.iter().map(|raw| parse_raw(raw)).collect(),
        })
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchAck {
    pub batch_id: String,
    pub accepted: i64,
    pub duplicates: i64,
    pub rejected: i64,
    pub errors: Vec<ItemError>,
    /// Month-to-date spend of the budget scopes this batch added to, after it.
    #[schema(value_type = Vec<Object>)]
    pub spend: Vec<ScopeSpend>,
}

#[utoipa::path(post, path = "/internal/v1/usage-batches", tag = "internal", request_body = UsageBatch,
    security(("service_token" = [])),
    responses((status = 200, description = "What was new, what was seen before, what was refused", body = Envelope<BatchAck>)))]
pub async fn ingest_usage_batch(
    _service: ServiceCaller,
    State(state): State<AppState>,
    JsonBytes(body): JsonBytes,
) -> ApiResult<Response> {
    let batch = ParsedBatch::parse(&body)?;
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
        errors: Vec::new(),
        spend: Vec::new(),
    };
    let mut parsed = Vec::new();
    let mut lists = ResultLists::new(&batch.result_lists);
    for (index, record) in batch.records.into_iter().enumerate() {
        let record = match record.and_then(|r| check_time(r, now)) {
            Ok(record) => record,
            Err(error) => {
                ack.errors.push(ItemError::from_api_error(index, error));
                continue;
            }
        };
        let list = match &record.evaluation {
            Some(evaluation) => match lists.of(&evaluation.results, "evaluation.results") {
                Ok(list) => Some(list),
                Err(error) => {
                    ack.errors.push(ItemError { index, ..error });
                    continue;
                }
            },
            None => None,
        };
        parsed.push((index, record.into_input(), list));
    }
    let mut entries = Vec::with_capacity(parsed.len());
    let mut indexes = Vec::with_capacity(parsed.len());
    let mut decided = Vec::with_capacity(parsed.len());
    for (index, (keys, input), list) in &parsed {
        match usage_entry(
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
            }
            Err(error) => ack.errors.push(ItemError::from_api_error(*index, error)),
        }
    }
    let mut tx = state.db.begin_write().await?;
    place_decisions(&mut tx, &mut entries, &decided).await?;
    let recorded = ledger::record_batch(&mut tx, batch.batch_id.as_str(), &entries, now).await?;
    ack.spend = recorded.spend;
    // The failures among the decisions of the records new to the ledger: a resent
    // record's were audited with it the first time.
    let written: Vec<DecisionRow<'_>> = entries
        .iter()
        .zip(&decided)
        .zip(&recorded.outcomes)
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
        .collect();
    audit_violations(&mut tx, &written).await?;
    for (index, outcome) in indexes.into_iter().zip(recorded.outcomes) {
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
    ack.errors.sort_by_key(|error| error.index);
    tx.commit().await?;
    ack.rejected = i64::try_from(ack.errors.len()).unwrap_or(i64::MAX);
    Ok(envelope::ok(ack))
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
