//! Risk classification's rules: one classification or a bulk of them (each a new record,
//! the agent's level kept in step, audited as `risk.classified`), the current
//! classification and the list, and the suggestion.

use serde_json::json;
use serde_json::value::RawValue;
use warden_shared::ids::{is_valid_id, new_id, IdKind};
use warden_shared::timestamp::Timestamp;

use super::suggestion::{self, SuggestionInputs};
use super::{
    store, BulkItem, BulkOutcome, ClassifyInput, RiskClassification, RiskLevel, Suggestion,
};
use crate::api::envelope::Page;
use crate::api::extract::parse_raw;
use crate::api::telemetry::{item_error, ItemError};
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, Author, Proxies};
use crate::db::WriteTx;
use crate::error::{ApiError, ApiResult};
use crate::plans::{self, Feature};
use crate::state::AppState;

/// The most classifications one bulk call may carry.
pub const MAX_BULK: usize = 100;
const DAY_MS: i64 = 86_400_000;

/// Classifies `agent_id` as the caller.
pub async fn classify(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
    input: ClassifyInput,
) -> ApiResult<RiskClassification> {
    let mut tx = state.db.begin_write().await?;
    plans::require(
        &mut tx,
        &caller.tenant_id,
        Feature::RiskClassification,
        "risk classifications",
    )
    .await?;
    let request = Request {
        agent_id,
        risk_level: input.risk_level,
        justification: input.justification.as_str(),
        assessed_by: &caller.actor,
    };
    let (record, _) = write(&mut tx, caller.author(), state.clock.now(), request)
        .await?
        .ok_or_else(|| ApiError::not_found("agent"))?;
    tx.commit().await?;
    Ok(record)
}

/// Classifies each item it can, in one transaction; an item that cannot be read or
/// names no agent of the tenant is reported by index and the others are written.
pub async fn classify_bulk(
    state: &AppState,
    caller: &Caller,
    items: Vec<Box<RawValue>>,
) -> ApiResult<BulkOutcome> {
    if items.len() > MAX_BULK {
        return Err(ApiError::validation(
            "classifications",
            format!("classifications: at most {MAX_BULK} per call"),
        ));
    }
    let mut tx = state.db.begin_write().await?;
    plans::require(
        &mut tx,
        &caller.tenant_id,
        Feature::RiskClassification,
        "risk classifications",
    )
    .await?;
    let now = state.clock.now();
    let mut outcome = BulkOutcome::default();
    for (index, raw) in items.iter().enumerate() {
        let item: BulkItem = match parse_raw(raw) {
            Ok(item) => item,
            Err(error) => {
                outcome.errors.push(item_error(index, error));
                continue;
            }
        };
        let assessed_by = item
            .assessed_by
            .as_ref()
            .map_or(caller.actor.as_str(), |by| by.as_str());
        let request = Request {
            agent_id: item.agent_id.as_str(),
            risk_level: item.risk_level,
            justification: item.justification.as_str(),
            assessed_by,
        };
        match write(&mut tx, caller.author(), now, request).await? {
            Some((_, true)) => outcome.updated += 1,
            Some((_, false)) => outcome.created += 1,
            None => outcome.errors.push(ItemError {
                index,
                field: Some("agent_id".to_owned()),
                message: "agent_id: no such agent".to_owned(),
            }),
        }
    }
    tx.commit().await?;
    outcome.failed = outcome.errors.len();
    Ok(outcome)
}

/// One classification to write.
struct Request<'a> {
    agent_id: &'a str,
    risk_level: RiskLevel,
    justification: &'a str,
    assessed_by: &'a str,
}

/// Writes one classification; `None` when the tenant has no such agent. The flag says
/// whether the agent had a level before.
async fn write(
    tx: &mut WriteTx,
    author: Author<'_>,
    now: Timestamp,
    request: Request<'_>,
) -> ApiResult<Option<(RiskClassification, bool)>> {
    if !is_valid_id(IdKind::Agent, request.agent_id) {
        return Ok(None);
    }
    let Some((agent_name, previous)) =
        store::agent_level(tx, author.tenant_id, request.agent_id).await?
    else {
        return Ok(None);
    };
    let record = RiskClassification {
        id: new_id(IdKind::RiskClassification, now.as_millis()),
        agent_id: request.agent_id.to_owned(),
        agent_name,
        risk_level: request.risk_level,
        previous_risk_level: previous.as_deref().and_then(RiskLevel::parse),
        justification: request.justification.to_owned(),
        assessed_by: request.assessed_by.to_owned(),
        assessed_at: now,
    };
    store::insert(tx, author.tenant_id, &record).await?;
    changes::record(
        tx,
        author,
        now,
        AuditEvent {
            event_type: "risk.classified",
            target_type: "agent",
            target_id: &record.agent_id,
            details: json!({
                "classification_id": record.id,
                "risk_level": record.risk_level.as_str(),
                "previous_risk_level": record.previous_risk_level.map(RiskLevel::as_str),
                "justification": record.justification,
                "assessed_by": record.assessed_by,
            }),
        },
        Proxies::Unaffected,
    )
    .await?;
    let had_level = record.previous_risk_level.is_some();
    Ok(Some((record, had_level)))
}

/// The agent's current classification (404 when the agent does not exist or was never
/// classified).
pub async fn current(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
) -> ApiResult<RiskClassification> {
    if !is_valid_id(IdKind::Agent, agent_id) {
        return Err(ApiError::not_found("agent"));
    }
    store::current(state.db.pool(), &caller.tenant_id, agent_id)
        .await?
        .ok_or_else(|| ApiError::not_found("risk classification"))
}

pub async fn list(
    state: &AppState,
    caller: &Caller,
    level: Option<RiskLevel>,
    page: Page,
) -> ApiResult<(Vec<RiskClassification>, i64)> {
    let level = level.map(RiskLevel::as_str);
    Ok(store::list(state.db.pool(), &caller.tenant_id, level, page).await?)
}

/// What the rules suggest for the agent, with every rule's verdict and the inputs.
pub async fn suggest(state: &AppState, caller: &Caller, agent_id: &str) -> ApiResult<Suggestion> {
    let agent = crate::api::agents::get_agent_for(state, caller, agent_id).await?;
    let now = state.clock.now();
    let since = now.as_millis() - 30 * DAY_MS;
    let activity = store::activity(state.db.pool(), &caller.tenant_id, agent_id, since).await?;
    let inputs = SuggestionInputs {
        name: agent.name,
        description: agent.description,
        framework: agent.framework,
        environment: agent.environment,
        tags: agent.tags,
        models_used: activity.models_used,
        requests_30d: activity.requests,
        blocks_30d: activity.blocks,
        quarantines_30d: activity.quarantines,
        policy_refusals_30d: activity.policy_refusals,
        blocked_now: agent.blocked,
        quarantined_now: agent.quarantined,
    };
    let (level, rules) = suggestion::suggest(&inputs);
    let current = agent.risk_level.as_deref().and_then(RiskLevel::parse);
    Ok(Suggestion {
        agent_id: agent.id,
        suggested_risk_level: level,
        current_risk_level: current,
        differs_from_current: current != Some(level),
        rules,
        inputs,
        generated_at: now,
    })
}
