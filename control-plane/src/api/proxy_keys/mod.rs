//! Proxy keys (spec 2.17, 4.11): the credentials agents give the proxy, each with the
//! agent it acts for and the limits the proxy enforces.
//!
//! A proxy key is an API key of type proxy (scopes `proxy:forward` and `registry:read`)
//! plus a `proxy_keys` row; its id is the API key's id. Without an `agent_id` a new agent
//! named after the developer label is registered behind the key (taking one of the
//! plan's agent slots). Creation needs the Starter plan or above (402 otherwise).
//! Deleting the key here or through `/auth/api-keys` revokes it in the proxies.

mod input;
pub(crate) mod service;
mod store;

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::Response;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope, PageQuery, Paged};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;

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
    #[serde(serialize_with = "crate::api::money::plain_opt")]
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
    caller: Authorized<require::AdminWithProxy>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<CreateProxyKeyInput>,
) -> ApiResult<Response> {
    let key = service::create_proxy_key(&state, &caller, input).await?;
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
    let (keys, total) = service::list_proxy_keys(&state, &caller, page).await?;
    Ok(envelope::paged(keys, page, total))
}

#[utoipa::path(delete, path = "/proxy-keys/{api_key_id}", tag = "proxy",
    params(("api_key_id" = String, Path)), security(("bearer" = ["admin"])),
    responses((status = 204, description = "Revoked; connected proxies refuse it when this answers")))]
async fn delete_proxy_key(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(api_key_id): ApiPath<String>,
) -> ApiResult<Response> {
    service::delete_proxy_key(&state, &caller, &api_key_id).await?;
    Ok(envelope::no_content())
}
