//! The rules of assessments: a new version per POST under the agent's row lock, submit
//! once, both audited.

use serde_json::json;
use warden_shared::ids::{is_valid_id, new_id, IdKind};

use super::store;
use super::{Fria, FriaInput, FriaWithHistory};
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, Proxies};
use crate::db::WriteTx;
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::state::AppState;

pub async fn create(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
    input: FriaInput,
) -> ApiResult<Fria> {
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    lock_live_agent(&mut tx, &caller.tenant_id, agent_id).await?;
    let version = store::next_version(&mut tx, &caller.tenant_id, agent_id).await?;
    let fria = Fria {
        id: new_id(IdKind::Fria, now.as_millis()),
        agent_id: agent_id.to_owned(),
        version,
        status: "draft".to_owned(),
        processes: input.processes.into_inner(),
        frequency_and_scope: input.frequency_and_scope.into_inner(),
        categories_of_persons: input.categories_of_persons.into_inner(),
        specific_risks: input.specific_risks.into_inner(),
        human_oversight_measures: input.human_oversight_measures.into_inner(),
        risk_mitigation_measures: input.risk_mitigation_measures.into_inner(),
        created_at: now,
        created_by: caller.actor.clone(),
        submitted_at: None,
        submitted_by: None,
    };
    store::insert(&mut tx, &caller.tenant_id, &fria).await?;
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "fria.created",
            target_type: "fria",
            target_id: &fria.id,
            details: json!({ "agent_id": agent_id, "version": version }),
        },
        Proxies::Unaffected,
    )
    .await?;
    tx.commit().await?;
    Ok(fria)
}

pub async fn newest(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
) -> ApiResult<FriaWithHistory> {
    let mut versions = store::versions(state.db.pool(), &caller.tenant_id, agent_id).await?;
    if versions.is_empty() {
        return Err(ApiError::not_found("fria"));
    }
    let history = versions.iter().map(store::version_of).collect();
    Ok(FriaWithHistory {
        fria: versions.swap_remove(0),
        versions: history,
    })
}

pub async fn submit(state: &AppState, caller: &Caller, fria_id: &str) -> ApiResult<()> {
    if !is_valid_id(IdKind::Fria, fria_id) {
        return Err(ApiError::not_found("fria"));
    }
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let Some(fria) = store::get(&mut *tx, &caller.tenant_id, fria_id).await? else {
        return Err(ApiError::not_found("fria"));
    };
    if !store::submit(&mut tx, &caller.tenant_id, fria_id, now, &caller.actor).await? {
        return Err(ApiError::new(
            ErrorCode::FriaAlreadySubmitted,
            format!("assessment {fria_id} was submitted already and cannot change"),
        ));
    }
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "fria.submitted",
            target_type: "fria",
            target_id: fria_id,
            details: json!({ "agent_id": fria.agent_id, "version": fria.version }),
        },
        Proxies::Unaffected,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The agent's newest assessment, if any.
pub async fn newest_of(
    pool: &sqlx::AnyPool,
    tenant_id: &str,
    agent_id: &str,
) -> Result<Option<Fria>, sqlx::Error> {
    Ok(store::versions(pool, tenant_id, agent_id)
        .await?
        .into_iter()
        .next())
}

/// Locks the live agent's row for the transaction (versions are numbered one at a time
/// per agent); 404 when the tenant has no such agent.
async fn lock_live_agent(tx: &mut WriteTx, tenant_id: &str, agent_id: &str) -> ApiResult<()> {
    if !store::lock_live_agent(tx, tenant_id, agent_id).await? {
        return Err(ApiError::not_found("agent"));
    }
    Ok(())
}
