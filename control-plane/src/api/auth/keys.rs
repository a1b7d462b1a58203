//! Handlers of `/auth/me` and API keys: create (raw key once), list (never the key),
//! delete.

use super::service;

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use warden_shared::scopes::{KeyType, Scope};
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope, PageQuery, Paged};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::api::validate::Text;
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;

#[derive(Debug, Serialize, ToSchema)]
pub struct Me {
    /// The API key id, or the session id for a login session token.
    pub key_id: String,
    pub tenant_id: String,
    #[schema(value_type = Vec<String>)]
    pub scopes: Vec<Scope>,
}

/// Who the presented credential is.
#[utoipa::path(get, path = "/auth/me", tag = "auth", security(("bearer" = [])),
    responses((status = 200, description = "The caller", body = Envelope<Me>)))]
pub async fn me(caller: Authorized<require::AnyScope>) -> Response {
    envelope::ok(Me {
        key_id: caller.credential_id.clone(),
        tenant_id: caller.tenant_id.clone(),
        scopes: caller.scopes.clone(),
    })
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({ "name": "dashboard", "scopes": ["registry:read"], "expires_in_days": 30 }))]
pub struct CreateApiKeyInput {
    pub name: Text<1, 100>,
    /// Scopes to grant. Combined with `key_type` when both are given; at least one of
    /// the two is required.
    #[serde(default)]
    #[schema(value_type = Option<Vec<String>>)]
    pub scopes: Option<Vec<Scope>>,
    /// `admin`, `proxy` or `read_only`: a named set of scopes.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub key_type: Option<KeyType>,
    /// 1 to 3650. Omitted: the key does not expire.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 3650)]
    pub expires_in_days: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ApiKey {
    pub id: String,
    /// Present only in the creation response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_key: Option<String>,
    pub key_prefix: String,
    pub name: String,
    #[schema(value_type = Vec<String>)]
    pub scopes: Vec<Scope>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Timestamp>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
}

/// Creates a key with scopes the caller may grant (spec 5.5); 403 otherwise.
#[utoipa::path(post, path = "/auth/api-keys", tag = "auth", request_body = CreateApiKeyInput,
    security(("bearer" = [])),
    responses((status = 201, description = "The key, with `raw_key` shown once", body = Envelope<ApiKey>),
        (status = 403, description = "A requested scope is not the caller's to grant (`scope_not_grantable`)")))]
pub async fn create_api_key(
    caller: Authorized<require::AnyScope>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<CreateApiKeyInput>,
) -> ApiResult<Response> {
    let key = service::create_api_key(&state, &caller, input).await?;
    Ok(envelope::created(key))
}

/// Lists the tenant's keys; never their secrets.
#[utoipa::path(get, path = "/auth/api-keys", tag = "auth", params(PageQuery),
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "One page of keys", body = Paged<ApiKey>)))]
pub async fn list_api_keys(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Response> {
    let page = query.try_into()?;
    let (keys, total) = service::list_api_keys(&state, &caller, page).await?;
    Ok(envelope::paged(keys, page, total))
}

/// Deletes (revokes) a key at once. A caller may delete only a key whose scopes it
/// could have granted, so a narrow key cannot revoke a wider one.
#[utoipa::path(delete, path = "/auth/api-keys/{key_id}", tag = "auth",
    params(("key_id" = String, Path)), security(("bearer" = [])),
    responses((status = 204, description = "Deleted"),
        (status = 403, description = "The key is wider than the caller (`scope_not_grantable`)")))]
pub async fn delete_api_key(
    caller: Authorized<require::AnyScope>,
    State(state): State<AppState>,
    ApiPath(key_id): ApiPath<String>,
) -> ApiResult<Response> {
    service::delete_api_key(&state, &caller, &key_id).await?;
    Ok(envelope::no_content())
}
