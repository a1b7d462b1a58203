//! The rules of teams: unique names, no deleting a team that still has agents, audit.

use serde_json::json;
use warden_shared::ids::{is_valid_id, new_id, IdKind};

use super::store;
use super::{Team, TeamName};
use crate::api::envelope::Page;
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, Proxies};
use crate::db::{is_unique_violation, WriteTx};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::state::AppState;

pub async fn list_teams(
    state: &AppState,
    caller: &Caller,
    page: Page,
) -> ApiResult<(Vec<Team>, i64)> {
    let teams = store::list(state.db.pool(), &caller.tenant_id, page, month_start(state)).await?;
    let total = store::count(state.db.pool(), &caller.tenant_id).await?;
    Ok((teams, total))
}

pub async fn get_team(state: &AppState, caller: &Caller, team_id: &str) -> ApiResult<Team> {
    if !is_valid_id(IdKind::Team, team_id) {
        return Err(ApiError::not_found("team"));
    }
    store::get(
        state.db.pool(),
        &caller.tenant_id,
        team_id,
        month_start(state),
    )
    .await?
    .ok_or_else(|| ApiError::not_found("team"))
}

pub async fn create_team(state: &AppState, caller: &Caller, name: TeamName) -> ApiResult<Team> {
    let mut tx = state.db.begin_write().await?;
    let id = insert_team(state, &mut tx, caller, name.as_str()).await?;
    let team = store::get(&mut *tx, &caller.tenant_id, &id, month_start(state))
        .await?
        .ok_or_else(|| ApiError::internal("team vanished inside its own transaction"))?;
    tx.commit().await?;
    Ok(team)
}

/// The id of the live team called `name`, creating it (and auditing that) when there is
/// none. Registering an agent with a new team name creates the team this way.
pub async fn find_or_create_team_id(
    state: &AppState,
    tx: &mut WriteTx,
    caller: &Caller,
    name: &str,
) -> ApiResult<String> {
    if let Some(id) = store::find_id_by_name(&mut **tx, &caller.tenant_id, name).await? {
        return Ok(id);
    }
    insert_team(state, tx, caller, name).await
}

async fn insert_team(
    state: &AppState,
    tx: &mut WriteTx,
    caller: &Caller,
    name: &str,
) -> ApiResult<String> {
    let now = state.clock.now();
    let id = new_id(IdKind::Team, now.as_millis());
    store::insert(&mut **tx, &caller.tenant_id, &id, name, now.as_millis())
        .await
        .map_err(name_conflict)?;
    changes::record(
        tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "team.created",
            target_type: "team",
            target_id: &id,
            details: json!({ "name": name }),
        },
        Proxies::Unaffected,
    )
    .await?;
    Ok(id)
}

pub async fn rename_team(
    state: &AppState,
    caller: &Caller,
    team_id: &str,
    name: TeamName,
) -> ApiResult<Team> {
    let existing = get_team(state, caller, team_id).await?;
    let mut tx = state.db.begin_write().await?;
    let renamed = store::rename(&mut *tx, &caller.tenant_id, team_id, name.as_str())
        .await
        .map_err(name_conflict)?;
    if !renamed {
        return Err(ApiError::not_found("team"));
    }
    changes::record(
        &mut tx,
        caller.author(),
        state.clock.now(),
        AuditEvent {
            event_type: "team.updated",
            target_type: "team",
            target_id: team_id,
            details: json!({ "name": { "from": existing.name, "to": name.as_str() } }),
        },
        Proxies::Unaffected,
    )
    .await?;
    let team = store::get(&mut *tx, &caller.tenant_id, team_id, month_start(state))
        .await?
        .ok_or_else(|| ApiError::not_found("team"))?;
    tx.commit().await?;
    Ok(team)
}

pub async fn delete_team(state: &AppState, caller: &Caller, team_id: &str) -> ApiResult<()> {
    let team = get_team(state, caller, team_id).await?;
    let mut tx = state.db.begin_write().await?;
    // Checked inside the write transaction so that an agent assigned concurrently cannot
    // slip in between the check and the delete.
    if store::live_agent_count(&mut *tx, &caller.tenant_id, team_id).await? > 0 {
        return Err(ApiError::new(
            ErrorCode::TeamHasAgents,
            "the team still has agents; reassign or delete them first",
        ));
    }
    let now = state.clock.now();
    if !store::soft_delete(&mut *tx, &caller.tenant_id, team_id, now.as_millis()).await? {
        return Err(ApiError::not_found("team"));
    }
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "team.deleted",
            target_type: "team",
            target_id: team_id,
            details: json!({ "name": team.name }),
        },
        Proxies::Unaffected,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

fn month_start(state: &AppState) -> i64 {
    crate::api::range::month_start(state.clock.now())
}

fn name_conflict(error: sqlx::Error) -> ApiError {
    if is_unique_violation(&error) {
        ApiError::new(
            ErrorCode::TeamNameTaken,
            "a team with that name already exists",
        )
    } else {
        error.into()
    }
}
