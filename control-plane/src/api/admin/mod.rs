//! Platform administration (spec 4.14): list, create and delete tenants.
//!
//! Only `platform:admin` reaches these routes. The operators' own tenant (which holds the
//! platform-admin key) is not listed and cannot be deleted.

mod service;
mod store;

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope, Page, PageQuery, Paged};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::plans::Plan;
use crate::state::AppState;
use crate::validate::{Email, Text};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_tenants, create_tenant))
        .routes(routes!(get_tenant, delete_tenant))
}

/// A tenant as platform operators see it (spec 2.20).
#[derive(Debug, Serialize, ToSchema)]
pub struct Tenant {
    pub id: String,
    pub company_name: String,
    #[schema(value_type = String)]
    pub plan: String,
    pub active_agents: i64,
    pub agent_limit: i64,
    pub owner_email: Option<String>,
    #[serde(serialize_with = "crate::api::money::plain")]
    pub monthly_cost_usd: f64,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// The time of the tenant's latest audited change.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub last_activity: Option<Timestamp>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedTenant {
    #[serde(flatten)]
    pub tenant: Tenant,
    /// An `admin` key of the new tenant, shown only in this response.
    pub api_key: String,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TenantFilter {
    /// `free`, `starter`, `professional`, `enterprise` or `enterprise_plus`.
    pub plan: Option<Plan>,
    #[param(minimum = 1, maximum = 1000000, default = 1)]
    pub page: Option<i64>,
    #[param(minimum = 1, maximum = 100, default = 20)]
    pub limit: Option<i64>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenantInput {
    pub company_name: Text<1, 200>,
    pub owner_email: Email,
    /// `free`, `starter`, `professional`, `enterprise` or `enterprise_plus`.
    #[schema(schema_with = crate::api::openapi_enums::plan)]
    pub plan: Plan,
    /// 1 to 1,000,000 active agents; defaults to the plan's limit.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1_000_000)]
    pub agent_limit: Option<i64>,
}

#[utoipa::path(get, path = "/admin/tenants", tag = "platform", params(TenantFilter),
    security(("bearer" = ["platform:admin"])),
    responses((status = 200, description = "One page of tenants, newest first", body = Paged<Tenant>)))]
async fn list_tenants(
    _caller: Authorized<require::PlatformAdmin>,
    State(state): State<AppState>,
    ApiQuery(filter): ApiQuery<TenantFilter>,
) -> ApiResult<Response> {
    let page: Page = PageQuery {
        page: filter.page,
        limit: filter.limit,
    }
    .try_into()?;
    let (tenants, total) = service::list_tenants(&state, filter.plan, page).await?;
    Ok(envelope::paged(tenants, page, total))
}

/// Creates a tenant and an `admin` key for it, shown once.
#[utoipa::path(post, path = "/admin/tenants", tag = "platform", request_body = CreateTenantInput,
    security(("bearer" = ["platform:admin"])),
    responses((status = 201, description = "The tenant and its admin key", body = Envelope<CreatedTenant>)))]
async fn create_tenant(
    caller: Authorized<require::PlatformAdmin>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<CreateTenantInput>,
) -> ApiResult<Response> {
    let created = service::create_tenant(&state, &caller, input).await?;
    Ok(envelope::created(created))
}

#[utoipa::path(get, path = "/admin/tenants/{tenant_id}", tag = "platform",
    params(("tenant_id" = String, Path)), security(("bearer" = ["platform:admin"])),
    responses((status = 200, description = "The tenant", body = Envelope<Tenant>)))]
async fn get_tenant(
    _caller: Authorized<require::PlatformAdmin>,
    State(state): State<AppState>,
    ApiPath(tenant_id): ApiPath<String>,
) -> ApiResult<Response> {
    let tenant = service::get_tenant(&state, &tenant_id).await?;
    Ok(envelope::ok(tenant))
}

/// Permanently deletes the tenant and every row it owns, in one transaction.
#[utoipa::path(delete, path = "/admin/tenants/{tenant_id}", tag = "platform",
    params(("tenant_id" = String, Path)), security(("bearer" = ["platform:admin"])),
    responses((status = 204, description = "Deleted with all its data"),
        (status = 403, description = "The platform operators' tenant (`platform_tenant_protected`)")))]
async fn delete_tenant(
    caller: Authorized<require::PlatformAdmin>,
    State(state): State<AppState>,
    ApiPath(tenant_id): ApiPath<String>,
) -> ApiResult<Response> {
    service::delete_tenant(&state, &caller, &tenant_id).await?;
    Ok(envelope::no_content())
}
