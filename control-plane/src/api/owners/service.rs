//! Ownership rules: an owner added once per agent, removed by record id, each change
//! audited; lists of an agent's owners and of an owner's agents.

use serde_json::json;
use warden_shared::ids::{is_valid_id, IdKind};

use super::{store, AddOwnerInput, Ownership, Permissions};
use crate::api::agents::{agents_owned_by, get_agent_for, Agent};
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, Proxies};
use crate::db::is_unique_violation;
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::state::AppState;

pub async fn add_owner(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
    input: AddOwnerInput,
) -> ApiResult<Ownership> {
    get_agent_for(state, caller, agent_id).await?;
    let given = input.permissions.unwrap_or_default();
    let mut record = Ownership {
        id: 0,
        agent_id: agent_id.to_owned(),
        owner_type: input.owner_type,
        owner_id: input.owner_id.into_inner(),
        owner_name: input.owner_name.into_inner(),
        // The spec's defaults: may invoke, may not configure or delete.
        permissions: Permissions {
            can_invoke: given.can_invoke.unwrap_or(true),
            can_configure: given.can_configure.unwrap_or(false),
            can_delete: given.can_delete.unwrap_or(false),
        },
        created_at: state.clock.now(),
    };
    let mut tx = state.db.begin_write().await?;
    record.id = match store::insert(&mut tx, &caller.tenant_id, &record).await {
        Ok(id) => id,
        Err(error) if is_unique_violation(&error) => {
            return Err(ApiError::new(
                ErrorCode::OwnerExists,
                format!(
                    "{} `{}` already owns this agent",
                    record.owner_type.as_str(),
                    record.owner_id
                ),
            ))
        }
        Err(error) => return Err(error.into()),
    };
    changes::record(
        &mut tx,
        caller.author(),
        record.created_at,
        AuditEvent {
            event_type: "agent.owner_added",
            target_type: "agent",
            target_id: agent_id,
            details: json!({
                "ownership_id": record.id,
                "owner_type": record.owner_type.as_str(),
                "owner_id": record.owner_id,
                "owner_name": record.owner_name,
                "permissions": record.permissions,
            }),
        },
        Proxies::Unaffected,
    )
    .await?;
    tx.commit().await?;
    Ok(record)
}

pub async fn remove_owner(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
    record_id: &str,
) -> ApiResult<()> {
    let record_id: i64 = record_id
        .parse()
        .map_err(|_| ApiError::not_found("ownership record"))?;
    if !is_valid_id(IdKind::Agent, agent_id) {
        return Err(ApiError::not_found("agent"));
    }
    let mut tx = state.db.begin_write().await?;
    let removed = store::delete(&mut tx, &caller.tenant_id, agent_id, record_id)
        .await?
        .ok_or_else(|| ApiError::not_found("ownership record"))?;
    changes::record(
        &mut tx,
        caller.author(),
        state.clock.now(),
        AuditEvent {
            event_type: "agent.owner_removed",
            target_type: "agent",
            target_id: agent_id,
            details: json!({
                "ownership_id": removed.id,
                "owner_type": removed.owner_type.as_str(),
                "owner_id": removed.owner_id,
            }),
        },
        Proxies::Unaffected,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

pub async fn owners_of(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
) -> ApiResult<Vec<Ownership>> {
    get_agent_for(state, caller, agent_id).await?;
    Ok(store::of_agent(state.db.pool(), &caller.tenant_id, agent_id).await?)
}

pub async fn agents_of(state: &AppState, caller: &Caller, owner_id: &str) -> ApiResult<Vec<Agent>> {
    agents_owned_by(state, caller, owner_id).await
}
