//! Proxy keys (spec 2.17, 4.11): the credentials agents give the proxy, each with the
//! agent it acts for and the limits the proxy enforces.
//!
//! A proxy key is an API key of type proxy (scopes `proxy:forward` and `registry:read`)
//! plus a `proxy_keys` row; its id is the API key's id. Without an `agent_id` a new agent
//! named after the developer label is registered behind the key (taking one of the
//! plan's agent slots). Creation needs the Starter plan or above (402 otherwise).
//! Deleting the key here or through `/auth/api-keys` revokes it in the proxies.

mod input;
mod store;

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::Response;
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::ids::{is_valid_id, IdKind};
use warden_shared::pricing::usd_to_micros;
use warden_shared::scopes::KeyType;
use warden_shared::timestamp::Timestamp;

use crate::api::agents::{register_agent_in, CreateAgentInput};
use crate::api::envelope::{self, Envelope, PageQuery, Paged};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::auth::{require, Authorized, Caller};
use crate::changes::{self, AuditEvent, ChangeKind, Proxies};
use crate::db::WriteTx;
use crate::error::{ApiError, ApiResult};
use crate::plans::{self, Feature};
use crate::state::AppState;
use crate::tenancy;

pub use input::{CreateProxyKeyInput, RateLimitOverride};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_proxy_keys, create_proxy_key))
        .routes(routes!(delete_proxy_key))
}

/// A proxy key as the API shows it; `raw_key` only in the creation response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProxyKey {
    pub api_key_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_key: Option<String>,
    pub key_prefix: String,
    pub developer_label: String,
    pub agent_id: String,
    pub team_id: Option<String>,
    /// Empty: every provider.
    pub allowed_providers: Vec<String>,
    /// Empty: every model of the allowed providers.
    pub allowed_models: Vec<String>,
    /// Requested model → model the proxy sends instead.
    pub model_overrides: BTreeMap<String, String>,
    pub rate_limit_override: Option<RateLimitOverride>,
    /// Null: no limit of the key's own.
    pub budget_limit_usd: Option<f64>,
    /// True: the proxy uses the tenant's managed key for the provider.
    pub use_managed_key: bool,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Timestamp>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
}

#[utoipa::path(post, path = "/proxy-keys", tag = "proxy", request_body = CreateProxyKeyInput,
    security(("bearer" = ["admin"])),
    responses((status = 201, description = "The key, with `raw_key` shown once", body = Envelope<ProxyKey>),
        (status = 402, description = "The plan has no proxy (`plan_upgrade_required`) or no agent slot left (`agent_limit_reached`)")))]
async fn create_proxy_key(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<CreateProxyKeyInput>,
) -> ApiResult<Response> {
    let settings = input.validate()?;
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    plans::require(&mut tx, &caller.tenant_id, Feature::Proxy, "proxy keys").await?;
    let (agent_id, team_id) = agent_behind_key(&state, &mut tx, &caller, &input).await?;
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
    Ok(envelope::created(key))
}

#[utoipa::path(get, path = "/proxy-keys", tag = "proxy", params(PageQuery),
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "One page of proxy keys, newest first; never their secrets", body = Paged<ProxyKey>)))]
async fn list_proxy_keys(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Response> {
    let page = query.try_into()?;
    let keys = store::list(state.db.pool(), &caller.tenant_id, page).await?;
    let total = store::count(state.db.pool(), &caller.tenant_id).await?;
    Ok(envelope::paged(keys, page, total))
}

#[utoipa::path(delete, path = "/proxy-keys/{api_key_id}", tag = "proxy",
    params(("api_key_id" = String, Path)), security(("bearer" = ["admin"])),
    responses((status = 204, description = "Revoked; connected proxies refuse it within a second")))]
async fn delete_proxy_key(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(api_key_id): ApiPath<String>,
) -> ApiResult<Response> {
    if !is_valid_id(IdKind::ApiKey, &api_key_id) {
        return Err(ApiError::not_found("proxy_key"));
    }
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let Some(label) = store::delete(&mut tx, &caller.tenant_id, &api_key_id).await? else {
        return Err(ApiError::not_found("proxy_key"));
    };
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "proxy_key.deleted",
            target_type: "api_key",
            target_id: &api_key_id,
            details: json!({ "developer_label": label }),
        },
        Proxies::Reload(ChangeKind::ApiKey),
    )
    .await?;
    tx.commit().await?;
    Ok(envelope::no_content())
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
