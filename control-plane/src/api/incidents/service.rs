//! The rules of incidents: the report with its deadline, updates kept and audited, the
//! closed state final.

use serde_json::json;
use warden_shared::ids::{is_valid_id, new_id, IdKind};

use super::deadline::{self, Grounds};
use super::store;
use super::{
    Incident, IncidentQuery, IncidentStatus, IncidentUpdate, ReportIncidentInput,
    UpdateIncidentInput,
};
use crate::api::agents::agent_is_live;
use crate::api::envelope::Page;
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, Proxies};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::state::AppState;
use crate::validate::Text;

const MAX_AFFECTED: i64 = 1_000_000_000;

pub async fn report(
    state: &AppState,
    caller: &Caller,
    input: ReportIncidentInput,
) -> ApiResult<Incident> {
    let affected = input.affected_persons_count.unwrap_or(0);
    if !(0..=MAX_AFFECTED).contains(&affected) {
        return Err(ApiError::validation(
            "affected_persons_count",
            format!("affected_persons_count: 0 to {MAX_AFFECTED}"),
        ));
    }
    let now = state.clock.now();
    let grounds = Grounds {
        involves_health_or_death: input.involves_health_or_death.unwrap_or(false),
        widespread_infringement: input.widespread_infringement.unwrap_or(false),
        critical_infrastructure: input.critical_infrastructure.unwrap_or(false),
    };
    let text = |value: Option<Text<1, 10_000>>| value.map(Text::into_inner).unwrap_or_default();
    let incident = Incident {
        id: new_id(IdKind::Incident, now.as_millis()),
        agent_id: input.agent_id.clone(),
        title: input.title.into_inner(),
        severity: input.severity.as_str().to_owned(),
        description: input.description.into_inner(),
        impact: text(input.impact),
        immediate_actions: text(input.immediate_actions),
        root_cause: text(input.root_cause),
        affected_persons_count: affected,
        involves_health_or_death: grounds.involves_health_or_death,
        widespread_infringement: grounds.widespread_infringement,
        critical_infrastructure: grounds.critical_infrastructure,
        status: IncidentStatus::Open.as_str().to_owned(),
        authority_notified: false,
        authority_notified_at: None,
        reported_at: now,
        reported_by: caller.actor.clone(),
        updated_at: now,
        reporting: deadline::reporting(grounds, now, None, now),
        updates: Some(Vec::new()),
    };
    let mut tx = state.db.begin_write().await?;
    if !agent_is_live(&mut *tx, &caller.tenant_id, &input.agent_id).await? {
        return Err(ApiError::validation(
            "agent_id",
            "agent_id: no such agent in this tenant",
        ));
    }
    store::insert(&mut tx, &caller.tenant_id, &incident).await?;
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "incident.created",
            target_type: "incident",
            target_id: &incident.id,
            details: json!({
                "agent_id": incident.agent_id,
                "title": incident.title,
                "severity": incident.severity,
                "affected_persons_count": affected,
                "report_due_at": incident.reporting.due_at,
                "deadline_basis": incident.reporting.basis,
            }),
        },
        Proxies::Unaffected,
    )
    .await?;
    tx.commit().await?;
    Ok(incident)
}

pub async fn get(state: &AppState, caller: &Caller, id: &str) -> ApiResult<Incident> {
    let mut incident = find(state, caller, id).await?;
    incident.updates = Some(store::updates(state.db.pool(), &caller.tenant_id, id).await?);
    Ok(incident)
}

pub async fn list(
    state: &AppState,
    caller: &Caller,
    query: &IncidentQuery,
    page: Page,
) -> ApiResult<(Vec<Incident>, i64)> {
    Ok(store::list(
        state.db.pool(),
        &caller.tenant_id,
        query.status.map(IncidentStatus::as_str),
        query.agent_id.as_ref().map(Text::as_str),
        page,
        state.clock.now(),
    )
    .await?)
}

pub async fn update(
    state: &AppState,
    caller: &Caller,
    id: &str,
    input: UpdateIncidentInput,
) -> ApiResult<Incident> {
    if input.status.is_none() && input.update_note.is_none() && input.authority_notified.is_none() {
        return Err(ApiError::validation(
            "status",
            "give at least one of status, update_note, authority_notified",
        ));
    }
    if !is_valid_id(IdKind::Incident, id) {
        return Err(ApiError::not_found("incident"));
    }
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let Some(mut incident) = store::get(&mut *tx, &caller.tenant_id, id, now).await? else {
        return Err(ApiError::not_found("incident"));
    };
    if incident.status == IncidentStatus::Closed.as_str() {
        return Err(ApiError::new(
            ErrorCode::IncidentClosed,
            format!("incident {id} is closed and takes no more updates"),
        ));
    }
    let notifies = input.authority_notified == Some(true) && !incident.authority_notified;
    if input.authority_notified == Some(false) && incident.authority_notified {
        return Err(ApiError::validation(
            "authority_notified",
            "authority_notified: the authority was notified already; that cannot be undone",
        ));
    }
    if let Some(status) = input.status {
        incident.status = status.as_str().to_owned();
    }
    if notifies {
        incident.authority_notified = true;
        incident.authority_notified_at = Some(now);
    }
    incident.updated_at = now;
    let update = IncidentUpdate {
        status: input.status.map(|status| status.as_str().to_owned()),
        note: input.update_note.map(Text::into_inner),
        authority_notified: notifies,
        created_at: now,
        created_by: caller.actor.clone(),
    };
    store::update(&mut tx, &caller.tenant_id, &incident, &update).await?;
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "incident.updated",
            target_type: "incident",
            target_id: id,
            details: json!({
                "status": update.status,
                "note": update.note,
                "authority_notified": notifies,
            }),
        },
        Proxies::Unaffected,
    )
    .await?;
    tx.commit().await?;
    get(state, caller, id).await
}

async fn find(state: &AppState, caller: &Caller, id: &str) -> ApiResult<Incident> {
    if !is_valid_id(IdKind::Incident, id) {
        return Err(ApiError::not_found("incident"));
    }
    store::get(state.db.pool(), &caller.tenant_id, id, state.clock.now())
        .await?
        .ok_or_else(|| ApiError::not_found("incident"))
}
