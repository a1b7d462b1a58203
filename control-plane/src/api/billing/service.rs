//! The rules of billing: the account as shown, the free slot, checkout, and the plan
//! changes that wait for the end of the period.

use serde_json::{json, Value};
use warden_shared::ids::{new_id, IdKind};
use warden_shared::pricing::micros_to_usd;
use warden_shared::timestamp::Timestamp;

use super::store::{self, Checkout};
use super::{period, Billing, CheckoutOutcome, FreeSlot};
use crate::api::agents::agent_is_live;
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, Author, Proxies};
use crate::db::{Db, WriteTx};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::plans::Plan;
use crate::state::AppState;

/// How long a checkout link is valid.
const CHECKOUT_TTL_MS: i64 = 3_600_000;

pub async fn billing(state: &AppState, caller: &Caller) -> ApiResult<Billing> {
    let account = store::account(state.db.pool(), &caller.tenant_id)
        .await?
        .ok_or_else(|| ApiError::not_found("tenant"))?;
    let plan = Plan::of_tenant(&account.plan);
    let (start, end) = period::of(state.clock.now());
    let free_agent_id = if plan == Plan::Free {
        let mut conn = state.db.pool().acquire().await?;
        store::recorded_agent(
            &mut conn,
            &caller.tenant_id,
            account.free_agent_id.as_deref(),
        )
        .await?
    } else {
        None
    };
    Ok(Billing {
        plan: account.plan,
        active_agents: account.active_agents,
        agent_limit: account.agent_limit,
        billing_period_start: start,
        billing_period_end: end,
        monthly_cost_usd: micros_to_usd(plan.price_micros()),
        features: plan.features(),
        payment_method: account
            .payment_method
            .and_then(|method| serde_json::from_str(&method).ok())
            .unwrap_or(Value::Null),
        payment_status: account.payment_status,
        pending_change: match (account.pending_plan, account.pending_plan_at) {
            (Some(plan), Some(at)) => {
                json!({ "plan": plan, "effective_date": Timestamp::from_millis(at) })
            }
            _ => Value::Null,
        },
        free_agent_id,
    })
}

/// On the free plan, the one agent whose telemetry the tenant records (the free slot, by
/// default its oldest live agent); `None` on every other plan (all agents recorded).
pub async fn recorded_agent(
    tx: &mut WriteTx,
    tenant_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    let Some(account) = store::account(&mut **tx, tenant_id).await? else {
        return Ok(None);
    };
    if account.plan != Plan::Free.as_str() {
        return Ok(None);
    }
    store::recorded_agent(tx, tenant_id, account.free_agent_id.as_deref()).await
}

/// The 402 for telemetry of an agent other than a free tenant's recorded one.
pub fn not_recorded(agent_id: &str, recorded: &str) -> ApiError {
    ApiError::new(
        ErrorCode::PlanUpgradeRequired,
        format!(
            "on the free plan only agent {recorded}'s telemetry is recorded, not {agent_id}'s; \
             choose it with PATCH /billing/free-slot or upgrade"
        ),
    )
    .with_details(json!({ "free_agent_id": recorded }))
}

pub async fn set_free_slot(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
) -> ApiResult<FreeSlot> {
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let account = store::account(&mut *tx, &caller.tenant_id)
        .await?
        .ok_or_else(|| ApiError::not_found("tenant"))?;
    if account.plan != Plan::Free.as_str() {
        return Err(ApiError::new(
            ErrorCode::NotOnFreePlan,
            format!(
                "the tenant is on the {} plan, which records every agent",
                account.plan
            ),
        ));
    }
    if !agent_is_live(&mut *tx, &caller.tenant_id, agent_id).await? {
        return Err(ApiError::validation(
            "agent_id",
            "agent_id: no such agent in this tenant",
        ));
    }
    store::set_free_agent(&mut tx, &caller.tenant_id, agent_id).await?;
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "billing.free_slot_set",
            target_type: "tenant",
            target_id: &caller.tenant_id,
            details: json!({ "agent_id": agent_id, "previous": account.free_agent_id }),
        },
        Proxies::Unaffected,
    )
    .await?;
    tx.commit().await?;
    Ok(FreeSlot {
        free_agent_id: agent_id.to_owned(),
    })
}

pub async fn checkout(state: &AppState, caller: &Caller, plan: &str) -> ApiResult<CheckoutOutcome> {
    let to = match Plan::parse(plan) {
        Some(plan @ (Plan::Starter | Plan::Professional | Plan::Enterprise)) => plan,
        Some(Plan::EnterprisePlus) => {
            return Err(ApiError::validation(
                "plan",
                "plan: enterprise_plus is sold by contract; contact sales",
            ))
        }
        _ => {
            return Err(ApiError::validation(
                "plan",
                "plan: one of starter, professional, enterprise",
            ))
        }
    };
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let account = store::account(&mut *tx, &caller.tenant_id)
        .await?
        .ok_or_else(|| ApiError::not_found("tenant"))?;
    let from = Plan::of_tenant(&account.plan);
    if from == to {
        return Err(ApiError::new(
            ErrorCode::PlanUnchanged,
            format!("the tenant is on the {} plan already", to.as_str()),
        ));
    }
    let outcome = if to.rank() > from.rank() {
        let amount = period::prorated(from.price_micros(), to.price_micros(), now);
        let id = new_id(IdKind::Checkout, now.as_millis());
        let expires_at = now.as_millis() + CHECKOUT_TTL_MS;
        store::insert_checkout(
            &mut tx,
            &caller.tenant_id,
            &Checkout {
                id: &id,
                from_plan: from.as_str(),
                to_plan: to.as_str(),
                amount_micros: amount,
                created_at: now.as_millis(),
                expires_at,
            },
        )
        .await?;
        CheckoutOutcome {
            action: "upgrade",
            from_plan: from.as_str().to_owned(),
            to_plan: to.as_str().to_owned(),
            prorated_amount_usd: Some(micros_to_usd(amount)),
            checkout_url: Some(format!(
                "{}/{id}",
                state.config.billing.checkout_base_url.trim_end_matches('/')
            )),
            expires_at: Some(Timestamp::from_millis(expires_at)),
            effective_date: None,
            message: None,
        }
    } else {
        let limit = to.default_agent_limit();
        if account.active_agents > limit {
            return Err(ApiError::new(
                ErrorCode::TooManyAgentsForPlan,
                format!(
                    "the {} plan allows {limit} active agents and the tenant has {}; delete agents first",
                    to.as_str(),
                    account.active_agents
                ),
            )
            .with_details(json!({ "active_agents": account.active_agents, "agent_limit": limit })));
        }
        let (_, end) = period::of(now);
        store::set_pending(&mut tx, &caller.tenant_id, to.as_str(), end).await?;
        CheckoutOutcome {
            action: "downgrade",
            from_plan: from.as_str().to_owned(),
            to_plan: to.as_str().to_owned(),
            prorated_amount_usd: None,
            checkout_url: None,
            expires_at: None,
            effective_date: Some(end),
            message: Some(format!(
                "The {} plan stays until {end}; the {} plan applies from then, with {limit} \
                 active agents or fewer.",
                from.as_str(),
                to.as_str()
            )),
        }
    };
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: if outcome.action == "upgrade" {
                "billing.checkout_started"
            } else {
                "billing.downgrade_scheduled"
            },
            target_type: "tenant",
            target_id: &caller.tenant_id,
            details: json!({
                "from_plan": outcome.from_plan,
                "to_plan": outcome.to_plan,
                "prorated_amount_usd": outcome.prorated_amount_usd,
                "effective_date": outcome.effective_date,
            }),
        },
        Proxies::Unaffected,
    )
    .await?;
    tx.commit().await?;
    Ok(outcome)
}

/// Moves the tenant to `plan` now, with the plan's agent limit (never below its active
/// agents), audited by `actor`.
pub async fn change_plan(
    tx: &mut WriteTx,
    tenant_id: &str,
    plan: Plan,
    actor: &str,
    why: &str,
    at: Timestamp,
) -> Result<(), sqlx::Error> {
    let account = store::account(&mut **tx, tenant_id).await?;
    let active = account.as_ref().map_or(0, |a| a.active_agents);
    let previous = account.map(|a| a.plan);
    store::set_plan(
        tx,
        tenant_id,
        plan.as_str(),
        plan.default_agent_limit().max(active),
    )
    .await?;
    changes::record(
        tx,
        Author { tenant_id, actor },
        at,
        AuditEvent {
            event_type: "billing.plan_changed",
            target_type: "tenant",
            target_id: tenant_id,
            details: json!({ "from_plan": previous, "to_plan": plan.as_str(), "reason": why }),
        },
        Proxies::Unaffected,
    )
    .await?;
    Ok(())
}

/// Applies the downgrades and cancellations whose period has ended; returns how many.
pub async fn apply_due_plan_changes(db: &Db, now: Timestamp) -> Result<usize, sqlx::Error> {
    let due = store::due_changes(db.pool(), now.as_millis()).await?;
    let mut applied = 0;
    for (tenant_id, _) in &due {
        let mut tx = db.begin_write().await?;
        // Read again under the row's lock: another replica may have applied it.
        let Some(plan) = store::take_due_change(&mut tx, tenant_id, now.as_millis()).await? else {
            continue;
        };
        let plan = Plan::of_tenant(&plan);
        change_plan(
            &mut tx,
            tenant_id,
            plan,
            "system",
            "scheduled change at the end of the billing period",
            now,
        )
        .await?;
        tx.commit().await?;
        applied += 1;
    }
    Ok(applied)
}
