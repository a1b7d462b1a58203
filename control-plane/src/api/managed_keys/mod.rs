//! Managed provider keys (spec 2.17, 4.11): a tenant's own provider credentials, kept in
//! AWS Secrets Manager. Warden stores only the reference, which must lie under
//! `warden/managed/<tenant_id>/` (see `warden_shared::managed`), and never returns it;
//! the proxy resolves it when a key with `use_managed_key` calls that provider.
//! One managed key per provider and tenant (409 for a second).

mod service;
mod store;

pub use service::tenant_secret_ref;

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::registry::Provider;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope, PageQuery, Paged};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;
use crate::validate::Text;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_managed_keys, create_managed_key))
        .routes(routes!(delete_managed_key))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateManagedKeyInput {
    #[schema(schema_with = crate::api::openapi_enums::provider)]
    pub provider: Provider,
    pub label: Text<1, 100>,
    /// `warden/managed/<tenant_id>/<name>`, or the ARN of such a secret. Never returned.
    pub secret_ref: Text<1, 512>,
}

/// A managed key as the API shows it: never the reference, never the value.
#[derive(Debug, Serialize, ToSchema)]
pub struct ManagedKey {
    pub id: String,
    pub provider: String,
    pub label: String,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
}

#[utoipa::path(post, path = "/managed-keys", tag = "proxy", request_body = CreateManagedKeyInput,
    security(("bearer" = ["admin"])),
    responses((status = 201, description = "The managed key (without its reference)", body = Envelope<ManagedKey>),
        (status = 402, description = "The plan has no proxy (`plan_upgrade_required`)"),
        (status = 409, description = "The tenant has a managed key for that provider (`managed_key_exists`)")))]
async fn create_managed_key(
    caller: Authorized<require::AdminWithProxy>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<CreateManagedKeyInput>,
) -> ApiResult<Response> {
    let key = service::create_managed_key(&state, &caller, input).await?;
    Ok(envelope::created(key))
}

#[utoipa::path(get, path = "/managed-keys", tag = "proxy", params(PageQuery),
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "One page of managed keys", body = Paged<ManagedKey>)))]
async fn list_managed_keys(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Response> {
    let page = query.try_into()?;
    let (keys, total) = service::list_managed_keys(&state, &caller, page).await?;
    Ok(envelope::paged(keys, page, total))
}

#[utoipa::path(delete, path = "/managed-keys/{managed_key_id}", tag = "proxy",
    params(("managed_key_id" = String, Path)), security(("bearer" = ["admin"])),
    responses((status = 204, description = "Deleted; connected proxies have stopped using it when this answers")))]
async fn delete_managed_key(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(managed_key_id): ApiPath<String>,
) -> ApiResult<Response> {
    service::delete_managed_key(&state, &caller, &managed_key_id).await?;
    Ok(envelope::no_content())
}
