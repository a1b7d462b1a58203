//! Handlers of `/auth/me` and API keys: create (raw key once), list (never the key),
//! delete.

use super::{service, ApiKey, CreateApiKeyInput};

use axum::extract::State;
use axum::response::Response;
use serde::Serialize;
use utoipa::ToSchema;
use warden_shared::scopes::Scope;

use crate::api::envelope::{self, Envelope, PageQuery, Paged};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
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
