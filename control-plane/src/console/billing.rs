//! Billing: the plan, active agents against its limit, the period and its cost, what
//! the plan includes, and a plan change (an upgrade answers the payment provider's
//! checkout URL to continue at; a downgrade takes effect at the period's end).

use askama::Template;
use axum::extract::State;
use axum::response::Response;

use super::form::Posted;
use super::page::{self, Layout, PageError};
use super::session::Signed;
use crate::api::billing::service as billing;
use crate::api::billing::{Billing, CheckoutInput, CheckoutOutcome};
use crate::auth::require;
use crate::state::AppState;

#[derive(Template)]
#[template(path = "billing.html")]
struct BillingPage {
    layout: Layout,
    billing: Billing,
    /// The plan change just asked for, when there was one.
    outcome: Option<CheckoutOutcome>,
}

async fn render(
    state: &AppState,
    signed: &Signed<require::Admin>,
    outcome: Option<CheckoutOutcome>,
) -> Result<Response, PageError> {
    let caller = &signed.caller;
    let page = BillingPage {
        layout: signed.layout(state, "billing").await?,
        billing: billing::billing(state, caller).await?,
        outcome,
    };
    Ok(page::render(&page))
}

/// `GET /console/billing`.
pub async fn show(
    State(state): State<AppState>,
    signed: Signed<require::Admin>,
) -> Result<Response, PageError> {
    render(&state, &signed, None).await
}

/// `POST /console/billing/checkout`: the plan change, answered with the page and what
/// the change came to.
pub async fn checkout(
    State(state): State<AppState>,
    signed: Signed<require::Admin>,
    Posted(input): Posted<CheckoutInput>,
) -> Result<Response, PageError> {
    let outcome = billing::checkout(&state, &signed.caller, &input.plan).await?;
    render(&state, &signed, Some(outcome)).await
}
