//! Platform administration (spec 4.14): list, create and delete tenants.
//!
//! Only `platform:admin` reaches these routes. The operators' own tenant (which holds the
//! platform-admin key) is not listed and cannot be deleted.

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::any::AnyRow;
use sqlx::Row;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::ids::{is_valid_id, IdKind};
use warden_shared::scopes::Scope;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope, Page, PageQuery, Paged};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::api::validate::{Email, Text};
use crate::auth::{require, Authorized};
use crate::changes::{self, AuditEvent, ChangeKind, Proxies};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::plans::Plan;
use crate::state::AppState;
use crate::tenancy::{self, NewTenant};

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
    #[param(value_type = Option<String>)]
    pub plan: Option<Plan>,
    #[param(minimum = 1, default = 1)]
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
    #[schema(value_type = String)]
    pub plan: Plan,
    /// 1 to 1,000,000 active agents; defaults to the plan's limit.
    #[serde(default)]
    pub agent_limit: Option<i64>,
}

/// `$month` names the parameter holding the start of the month for the tenant's spend.
macro_rules! select_tenants {
    ($month:literal, $clauses:expr) => {
        concat!(
            "SELECT t.id, t.company_name, t.plan, t.active_agents, t.agent_limit, t.owner_email, \
             t.created_at, (SELECT MAX(e.occurred_at) FROM audit_events e \
             WHERE e.tenant_id = t.id) AS last_activity, \
             (SELECT CAST(COALESCE(SUM(u.cost_micros), 0) AS BIGINT) FROM usage_model_hourly u \
              WHERE u.tenant_id = t.id AND u.hour >= ",
            $month,
            ") AS monthly_cost_micros \
             FROM tenants t ",
            $clauses
        )
    };
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
    let plan = filter.plan.map(Plan::as_str);
    let rows = sqlx::query(select_tenants!(
        "$4",
        "WHERE t.is_platform = 0 AND ($1 IS NULL OR t.plan = $1) \
         ORDER BY t.created_at DESC, t.id DESC LIMIT $2 OFFSET $3"
    ))
    .bind(plan)
    .bind(page.limit)
    .bind(page.offset())
    .bind(crate::api::cost::month_start(state.clock.now()))
    .fetch_all(state.db.pool())
    .await?;
    let total: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM tenants WHERE is_platform = 0 AND ($1 IS NULL OR plan = $1)",
    )
    .bind(plan)
    .fetch_one(state.db.pool())
    .await?;
    let tenants = rows
        .iter()
        .map(tenant_from_row)
        .collect::<Result<Vec<_>, _>>()?;
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
    let agent_limit = input
        .agent_limit
        .unwrap_or(input.plan.default_agent_limit());
    if !(1..=1_000_000).contains(&agent_limit) {
        return Err(ApiError::validation(
            "agent_limit",
            "agent_limit: must be 1 to 1000000",
        ));
    }
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let tenant_id = tenancy::insert_tenant(
        &mut tx,
        &caller.actor,
        now,
        &NewTenant {
            company_name: input.company_name.as_str(),
            owner_email: Some(input.owner_email.as_str()),
            plan: input.plan,
            agent_limit,
            is_platform: false,
        },
    )
    .await?;
    let key = tenancy::insert_api_key(
        &mut tx,
        &tenant_id,
        &caller.actor,
        now,
        "tenant admin key",
        &[Scope::Admin],
        None,
        None,
    )
    .await?;
    changes::record(&mut tx, caller.author(), now, AuditEvent {
            event_type: "tenant.created",
            target_type: "tenant",
            target_id: &tenant_id,
            details: json!({ "company_name": input.company_name.as_str(), "plan": input.plan.as_str() }),
        }, Proxies::Unaffected)
    .await?;
    let tenant = fetch_tenant(&mut tx, &tenant_id, crate::api::cost::month_start(now))
        .await?
        .ok_or_else(|| ApiError::internal("tenant vanished inside its own transaction"))?;
    tx.commit().await?;
    Ok(envelope::created(CreatedTenant {
        tenant,
        api_key: key.raw_key,
    }))
}

#[utoipa::path(get, path = "/admin/tenants/{tenant_id}", tag = "platform",
    params(("tenant_id" = String, Path)), security(("bearer" = ["platform:admin"])),
    responses((status = 200, description = "The tenant", body = Envelope<Tenant>)))]
async fn get_tenant(
    _caller: Authorized<require::PlatformAdmin>,
    State(state): State<AppState>,
    ApiPath(tenant_id): ApiPath<String>,
) -> ApiResult<Response> {
    if !is_valid_id(IdKind::Tenant, &tenant_id) {
        return Err(ApiError::not_found("tenant"));
    }
    let mut conn = state.db.pool().acquire().await?;
    let tenant = fetch_tenant(
        &mut conn,
        &tenant_id,
        crate::api::cost::month_start(state.clock.now()),
    )
    .await?
    .ok_or_else(|| ApiError::not_found("tenant"))?;
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
    if !is_valid_id(IdKind::Tenant, &tenant_id) {
        return Err(ApiError::not_found("tenant"));
    }
    let mut tx = state.db.begin_write().await?;
    let row = sqlx::query("SELECT company_name, is_platform FROM tenants WHERE id = $1")
        .bind(&tenant_id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| ApiError::not_found("tenant"))?;
    if row.try_get::<i64, _>("is_platform")? == 1 {
        return Err(ApiError::new(
            ErrorCode::PlatformTenantProtected,
            "the platform operators' tenant cannot be deleted",
        ));
    }
    let company_name: String = row.try_get("company_name")?;
    if !tenancy::delete_tenant_rows(&mut tx, &tenant_id).await? {
        return Err(ApiError::not_found("tenant"));
    }
    // Proxies drop everything of the tenant (its keys above all) from their snapshots.
    changes::record(
        &mut tx,
        caller.author(),
        state.clock.now(),
        AuditEvent {
            event_type: "tenant.deleted",
            target_type: "tenant",
            target_id: &tenant_id,
            details: json!({ "company_name": company_name }),
        },
        Proxies::Reload(ChangeKind::Tenant),
    )
    .await?;
    tx.commit().await?;
    Ok(envelope::no_content())
}

async fn fetch_tenant(
    conn: &mut sqlx::AnyConnection,
    tenant_id: &str,
    month_start: i64,
) -> Result<Option<Tenant>, sqlx::Error> {
    sqlx::query(select_tenants!(
        "$2",
        "WHERE t.id = $1 AND t.is_platform = 0"
    ))
    .bind(tenant_id)
    .bind(month_start)
    .fetch_optional(conn)
    .await?
    .as_ref()
    .map(tenant_from_row)
    .transpose()
}

fn tenant_from_row(row: &AnyRow) -> Result<Tenant, sqlx::Error> {
    Ok(Tenant {
        id: row.try_get("id")?,
        company_name: row.try_get("company_name")?,
        plan: row.try_get("plan")?,
        active_agents: row.try_get("active_agents")?,
        agent_limit: row.try_get("agent_limit")?,
        owner_email: row.try_get("owner_email")?,
        monthly_cost_usd: warden_shared::pricing::micros_to_usd(
            row.try_get("monthly_cost_micros")?,
        ),
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
        last_activity: row
            .try_get::<Option<i64>, _>("last_activity")?
            .map(Timestamp::from_millis),
    })
}
