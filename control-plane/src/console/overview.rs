//! The overview: what needs a person now. Each section shows only if the signed-in
//! person's scopes allow reading it (the API's scopes, checked here as there).

use askama::Template;
use axum::extract::State;
use axum::response::Response;
use warden_shared::scopes::Scope;

use super::approvals::Item;
use super::page::{self, Layout, PageError};
use super::session::Signed;
use crate::api::agents::{self, Agent, Only};
use crate::api::anomalies;
use crate::api::approvals;
use crate::api::budget::{self, BudgetScopeStatus};
use crate::api::cost::{self, SummaryQuery};
use crate::api::envelope::Page;
use crate::api::monitoring::{self, Overview};
use crate::api::range::Period;
use crate::auth::require;
use crate::error::ApiResult;
use crate::state::AppState;

/// How many pending approvals and flagged agents the overview lists.
const LISTED: i64 = 10;

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    layout: Layout,
    agents: Option<Overview>,
    pending: Option<Pending>,
    flagged: Option<Flagged>,
    spend: Option<Spend>,
    budgets: Option<Vec<BudgetScopeStatus>>,
    open_anomalies: Option<i64>,
}

/// The oldest pending approvals, with their age.
struct Pending {
    total: i64,
    oldest: Vec<Item>,
}

/// Blocked and quarantined agents.
struct Flagged {
    blocked: Vec<Agent>,
    quarantined: Vec<Agent>,
}

struct Spend {
    today: String,
    month: String,
}

/// `GET /console`.
pub async fn show(
    State(state): State<AppState>,
    signed: Signed<require::AnyScope>,
) -> Result<Response, PageError> {
    let caller = &signed.caller;
    let may = |scope: Scope| caller.has(scope);
    let page = OverviewPage {
        layout: signed.layout(&state, "overview").await?,
        agents: when(may(Scope::MonitoringRead), || {
            monitoring::service::monitoring_overview(&state, caller)
        })
        .await?,
        pending: when(may(Scope::GovernanceRead), || pending(&state, &signed)).await?,
        flagged: when(may(Scope::RegistryRead), || flagged(&state, &signed)).await?,
        spend: when(may(Scope::CostRead), || spend(&state, &signed)).await?,
        budgets: when(may(Scope::Admin), || async {
            Ok(budget::service::budget_status(&state, caller).await?.scopes)
        })
        .await?,
        open_anomalies: when(may(Scope::AnomalyRead), || async {
            let summary = anomalies::service::summary(&state, caller).await?;
            Ok(summary.by_status["open"].as_i64().unwrap_or(0))
        })
        .await?,
    };
    Ok(page::render(&page))
}

/// `read()` when `allowed`, else nothing.
async fn when<T, F, Fut>(allowed: bool, read: F) -> ApiResult<Option<T>>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ApiResult<T>>,
{
    if allowed {
        read().await.map(Some)
    } else {
        Ok(None)
    }
}

async fn pending(state: &AppState, signed: &Signed<require::AnyScope>) -> ApiResult<Pending> {
    let (total, oldest) = approvals::service::oldest_pending(state, &signed.caller, LISTED).await?;
    let now = state.clock.now().as_millis();
    Ok(Pending {
        total,
        oldest: oldest
            .into_iter()
            .map(|approval| Item::of(approval, now))
            .collect(),
    })
}

async fn flagged(state: &AppState, signed: &Signed<require::AnyScope>) -> ApiResult<Flagged> {
    let page = Page {
        page: 1,
        limit: LISTED,
    };
    let caller = &signed.caller;
    let blocked = agents::service::list_security_subset(state, caller, Only::Blocked, page);
    let quarantined = agents::service::list_security_subset(state, caller, Only::Quarantined, page);
    Ok(Flagged {
        blocked: blocked.await?.0,
        quarantined: quarantined.await?.0,
    })
}

async fn spend(state: &AppState, signed: &Signed<require::AnyScope>) -> ApiResult<Spend> {
    let of = |period| SummaryQuery {
        period: Some(period),
        from: None,
        to: None,
    };
    let today = cost::service::cost_summary(state, &signed.caller, &of(Period::Day)).await?;
    let month = cost::service::cost_summary(state, &signed.caller, &of(Period::Month)).await?;
    Ok(Spend {
        today: page::usd(today.total_cost_usd),
        month: page::usd(month.total_cost_usd),
    })
}
