//! The rules of proxy keys: the plan gate, the agent behind a key, expiry, the key's
//! one write with its audit event and the proxies' change row.

use crate::api::provider_names;
use serde_json::json;
use warden_shared::ids::{is_valid_id, IdKind};
use warden_shared::pricing::usd_to_micros;
use warden_shared::scopes::KeyType;
use warden_shared::timestamp::Timestamp;

use super::store;
use super::{CreateProxyKeyInput, ProxyKey};
use crate::api::agents::{register_agent_in, CreateAgentInput};
use crate::api::envelope::Page;
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, ChangeKind, Proxies};
use crate::db::WriteTx;
use crate::error::{ApiError, ApiResult};
use crate::plans::{self, Feature};
use crate::state::AppState;
use crate::tenancy;

/// Creates the key (and the agent behind it when none is named); `raw_key` is set only
/// in the value returned here.
pub async fn create_proxy_key(
    state: &AppState,
    caller: &Caller,
    input: CreateProxyKeyInput,
) -> ApiResult<ProxyKey> {
    let settings = input.validate()?;
    provider_names::require_known(
        &state.providers,
        "allowed_providers",
        input.allowed_providers.iter().flatten(),
    )?;
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    plans::require(&mut tx, &caller.tenant_id, Feature::Proxy, "proxy keys").await?;
    let (agent_id, team_id) = agent_behind_key(state, &mut tx, caller, &input).await?;
    let expires_at = input
        .expires_in_days
        .map(|days| Timestamp::from_millis(now.as_millis() + days * 86_400_000));
    let issued = tenancy::insert_api_key(
        &mut tx,
        &caller.tenant_id,
        &caller.actor,
        now,
        &format!("proxy: {}", input.developer_label.as_str()),
        KeyType::Proxy.scopes(),
        expires_at,
        None,
    )
    .await?;
    let key = ProxyKey {
        api_key_id: issued.id,
        raw_key: Some(issued.raw_key),
        key_prefix: issued.key_prefix,
        developer_label: input.developer_label.into_inner(),
        agent_id,
        team_id,
        allowed_providers: settings.allowed_providers,
        allowed_models: settings.allowed_models,
        model_overrides: settings.model_overrides,
        rate_limit_override: input.rate_limit_override,
        budget_limit_usd: input.budget_limit_usd,
        use_managed_key: input.use_managed_key.unwrap_or(false),
        expires_at,
        created_at: now,
    };
    store::insert(
        &mut tx,
        &caller.tenant_id,
        &key,
        input.budget_limit_usd.map(usd_to_micros),
    )
    .await?;
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "proxy_key.created",
            target_type: "api_key",
            target_id: &key.api_key_id,
            details: json!({
                "developer_label": key.developer_label,
                "agent_id": key.agent_id,
                "key_prefix": key.key_prefix,
            }),
        },
        Proxies::Reload(ChangeKind::ApiKey),
    )
    .await?;
    tx.commit().await?;
    Ok(key)
}

pub async fn list_proxy_keys(
    state: &AppState,
    caller: &Caller,
    page: Page,
) -> ApiResult<(Vec<ProxyKey>, i64)> {
    let keys = store::list(state.db.pool(), &caller.tenant_id, page).await?;
    let total = store::count(state.db.pool(), &caller.tenant_id).await?;
    Ok((keys, total))
}

/// Revokes the key: connected proxies refuse it from the change's version on.
pub async fn delete_proxy_key(
    state: &AppState,
    caller: &Caller,
    api_key_id: &str,
) -> ApiResult<()> {
    if !is_valid_id(IdKind::ApiKey, api_key_id) {
        return Err(ApiError::not_found("proxy_key"));
    }
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let Some(label) = store::delete(&mut tx, &caller.tenant_id, api_key_id).await? else {
        return Err(ApiError::not_found("proxy_key"));
    };
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "proxy_key.deleted",
            target_type: "api_key",
            target_id: api_key_id,
            details: json!({ "developer_label": label }),
        },
        Proxies::Reload(ChangeKind::ApiKey),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The agent the key acts for and its team: the given agent (which must be live in the
/// tenant), or a new agent registered in the same transaction.
async fn agent_behind_key(
    state: &AppState,
    tx: &mut WriteTx,
    caller: &Caller,
    input: &CreateProxyKeyInput,
) -> ApiResult<(String, Option<String>)> {
    let team_name = match &input.team_id {
        Some(team_id) => Some(
            store::team_name(tx, &caller.tenant_id, team_id)
                .await?
                .ok_or_else(|| {
                    ApiError::validation("team_id", "team_id: no such team in this tenant")
                })?,
        ),
        None => None,
    };
    if let Some(agent_id) = &input.agent_id {
        let agent_team = store::live_agent_team(tx, &caller.tenant_id, agent_id)
            .await?
            .ok_or_else(|| {
                ApiError::validation("agent_id", "agent_id: no such agent in this tenant")
            })?;
        return Ok((agent_id.clone(), input.team_id.clone().or(agent_team)));
    }
    let agent = register_agent_in(
        state,
        tx,
        caller,
        CreateAgentInput::named(input.developer_label.as_str(), team_name.as_deref())?,
    )
    .await?;
    Ok((agent.id, agent.team_id))
}
