//! The rules of platform administration: agent limits, the protected platform tenant,
//! and tenant creation and deletion each in one audited transaction.

use serde_json::json;
use warden_shared::ids::{is_valid_id, IdKind};
use warden_shared::scopes::Scope;

use super::{store, CreateTenantInput, CreatedTenant, Tenant};
use crate::api::envelope::Page;
use crate::api::range::month_start;
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, ChangeKind, Proxies};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::plans::Plan;
use crate::state::AppState;
use crate::tenancy::{self, NewTenant};

pub async fn list_tenants(
    state: &AppState,
    plan: Option<Plan>,
    page: Page,
) -> ApiResult<(Vec<Tenant>, i64)> {
    let plan = plan.map(Plan::as_str);
    let month = month_start(state.clock.now());
    let tenants = store::list(state.db.pool(), plan, page, month).await?;
    let total = store::count(state.db.pool(), plan).await?;
    Ok((tenants, total))
}

/// Creates a tenant and an `admin` key for it, whose raw value only this answer holds.
pub async fn create_tenant(
    state: &AppState,
    caller: &Caller,
    input: CreateTenantInput,
) -> ApiResult<CreatedTenant> {
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
    let details = json!({
        "company_name": input.company_name.as_str(),
        "plan": input.plan.as_str(),
    });
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "tenant.created",
            target_type: "tenant",
            target_id: &tenant_id,
            details,
        },
        Proxies::Unaffected,
    )
    .await?;
    let tenant = store::get(&mut *tx, &tenant_id, month_start(now))
        .await?
        .ok_or_else(|| ApiError::internal("tenant vanished inside its own transaction"))?;
    tx.commit().await?;
    Ok(CreatedTenant {
        tenant,
        api_key: key.raw_key,
    })
}

pub async fn get_tenant(state: &AppState, tenant_id: &str) -> ApiResult<Tenant> {
    if !is_valid_id(IdKind::Tenant, tenant_id) {
        return Err(ApiError::not_found("tenant"));
    }
    let month = month_start(state.clock.now());
    store::get(state.db.pool(), tenant_id, month)
        .await?
        .ok_or_else(|| ApiError::not_found("tenant"))
}

/// Permanently deletes the tenant and every row it owns, in one transaction.
pub async fn delete_tenant(state: &AppState, caller: &Caller, tenant_id: &str) -> ApiResult<()> {
    if !is_valid_id(IdKind::Tenant, tenant_id) {
        return Err(ApiError::not_found("tenant"));
    }
    let mut tx = state.db.begin_write().await?;
    let (company_name, is_platform) = store::name_and_platform_flag(&mut tx, tenant_id)
        .await?
        .ok_or_else(|| ApiError::not_found("tenant"))?;
    if is_platform {
        return Err(ApiError::new(
            ErrorCode::PlatformTenantProtected,
            "the platform operators' tenant cannot be deleted",
        ));
    }
    if !tenancy::delete_tenant_rows(&mut tx, tenant_id).await? {
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
            target_id: tenant_id,
            details: json!({ "company_name": company_name }),
        },
        Proxies::Reload(ChangeKind::Tenant),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
