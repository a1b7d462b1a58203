//! The rules of anomalies: filters, the summary, and the two audited moves.

use serde_json::json;
use warden_shared::ids::{is_valid_id, IdKind};

use super::store::{self, Filter};
use super::{Anomaly, AnomalyQuery, Summary};
use crate::anomalies::thresholds::TYPES;
use crate::api::envelope::Page;
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, Proxies};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::state::AppState;
use crate::validate::Text;

/// A person's move of an anomaly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    Acknowledge,
    Resolve,
}

pub async fn list(
    state: &AppState,
    caller: &Caller,
    query: &AnomalyQuery,
    page: Page,
) -> ApiResult<(Vec<Anomaly>, i64)> {
    let filter = Filter {
        status: query.status.map(super::AnomalyStatus::as_str),
        anomaly_type: query.anomaly_type.map(super::AnomalyType::as_str),
        agent_id: query.agent_id.as_ref().map(Text::as_str),
        severity: query.severity.map(super::Severity::as_str),
    };
    Ok(store::list(state.db.pool(), &caller.tenant_id, &filter, page).await?)
}

pub async fn get(state: &AppState, caller: &Caller, id: &str) -> ApiResult<Anomaly> {
    if !is_valid_id(IdKind::Anomaly, id) {
        return Err(ApiError::not_found("anomaly"));
    }
    store::get(state.db.pool(), &caller.tenant_id, id)
        .await?
        .ok_or_else(|| ApiError::not_found("anomaly"))
}

pub async fn summary(state: &AppState, caller: &Caller) -> ApiResult<Summary> {
    let counts = store::counts(state.db.pool(), &caller.tenant_id).await?;
    let mut by_status = json!({ "open": 0, "acknowledged": 0, "resolved": 0 });
    let mut by_type = serde_json::Map::new();
    for kind in TYPES {
        by_type.insert(kind.to_owned(), json!(0));
    }
    let mut total = 0;
    for (status, kind, count) in counts {
        total += count;
        by_status[&status] = json!(by_status[&status].as_i64().unwrap_or(0) + count);
        let sum = by_type
            .get(&kind)
            .and_then(serde_json::Value::as_i64)
            .unwrap_or(0)
            + count;
        by_type.insert(kind, json!(sum));
    }
    Ok(Summary {
        total,
        by_status,
        by_type: by_type.into(),
    })
}

pub async fn transition(
    state: &AppState,
    caller: &Caller,
    id: &str,
    step: Move,
    text: Option<String>,
) -> ApiResult<()> {
    if !is_valid_id(IdKind::Anomaly, id) {
        return Err(ApiError::not_found("anomaly"));
    }
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let Some(anomaly) = store::get(&mut *tx, &caller.tenant_id, id).await? else {
        return Err(ApiError::not_found("anomaly"));
    };
    let (moved, event_type, detail_key) = match step {
        Move::Acknowledge => (
            store::acknowledge(
                &mut tx,
                &caller.tenant_id,
                id,
                now,
                &caller.actor,
                text.as_deref(),
            )
            .await?,
            "anomaly.acknowledged",
            "note",
        ),
        Move::Resolve => (
            store::resolve(
                &mut tx,
                &caller.tenant_id,
                id,
                now,
                &caller.actor,
                text.as_deref(),
            )
            .await?,
            "anomaly.resolved",
            "resolution",
        ),
    };
    if !moved {
        return Err(ApiError::new(
            ErrorCode::InvalidAnomalyTransition,
            format!(
                "anomaly {id} is {} and cannot be {}",
                anomaly.status,
                match step {
                    Move::Acknowledge => "acknowledged (only an open anomaly can)",
                    Move::Resolve => "resolved again",
                }
            ),
        )
        .with_details(json!({ "status": anomaly.status })));
    }
    let mut details = json!({
        "agent_id": anomaly.agent_id,
        "anomaly_type": anomaly.anomaly_type,
    });
    details[detail_key] = json!(text);
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type,
            target_type: "anomaly",
            target_id: id,
            details,
        },
        Proxies::Unaffected,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
