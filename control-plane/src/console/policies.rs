//! Policies: the tenant's list in evaluation order, each enabled or disabled from the
//! page (in force on the proxies when the page answers), the templates to create one
//! from (created disabled, as the API does), and the dry run ("would this request
//! pass?"), which is `/policies/evaluate` over a form in the URL.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::json;
use warden_shared::scopes::Scope;

use super::enforcement::{self, Enforced};
use super::filters::Filters;
use super::form::Posted;
use super::page::{self, Layout, PageError};
use super::session::Signed;
use crate::api::policies::dry_run::{self, DryRunInput, DryRunResult};
use crate::api::policies::input::UpdatePolicyInput;
use crate::api::policies::templates::{self, PolicyTemplate};
use crate::api::policies::{self, FromTemplateInput, Policy};
use crate::auth::require;
use crate::state::AppState;

#[derive(Template)]
#[template(path = "policies.html")]
struct PoliciesPage {
    layout: Layout,
    policies: Vec<Policy>,
    templates: Vec<PolicyTemplate>,
    may_write: bool,
    enforced: Option<Enforced>,
    dry_run: DryRunForm,
    /// The dry run's results, when the form was filled in.
    results: Option<Result<Verdict, String>>,
}

/// The dry run's results, and whether any policy fails the request.
struct Verdict {
    results: Vec<DryRunResult>,
    refused: bool,
}

/// The dry run's fields as typed (all of them shown again with the results).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DryRunForm {
    #[serde(default)]
    agent_id: String,
    #[serde(default)]
    provider: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    environment: String,
    #[serde(default)]
    estimated_cost_usd: String,
    #[serde(default)]
    enforcement: Option<String>,
    #[serde(default)]
    unconfirmed: Option<String>,
}

impl DryRunForm {
    fn is_filled(&self) -> bool {
        !self.agent_id.is_empty() || !self.provider.is_empty() || !self.model.is_empty()
    }

    /// The API's input, read from the form by the API's own rules.
    fn input(&self) -> Result<DryRunInput, String> {
        let mut body = json!({
            "agent_id": self.agent_id,
            "provider": self.provider,
            "model": self.model,
        });
        if !self.environment.is_empty() {
            body["environment"] = json!(self.environment);
        }
        if !self.estimated_cost_usd.is_empty() {
            let cost: f64 = self
                .estimated_cost_usd
                .trim()
                .parse()
                .map_err(|_| "estimated_cost_usd: must be a number".to_owned())?;
            body["estimated_cost_usd"] = json!(cost);
        }
        serde_json::from_value(body).map_err(|error| error.to_string())
    }
}

/// `GET /console/policies`: the list, the templates, and the dry run when asked.
pub async fn show(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceRead>,
    filters: Filters<DryRunForm>,
) -> Result<Response, PageError> {
    let caller = &signed.caller;
    let form = filters.query;
    let results = match form.is_filled() {
        false => None,
        true => Some(match form.input() {
            Ok(input) => match dry_run::evaluate_for(&state, caller, &input).await {
                Ok(results) => Ok(Verdict {
                    refused: results.iter().any(|r| r.result.as_str() == "fail"),
                    results,
                }),
                // A refusal of the request described is the answer to show.
                Err(error) if error.code.status().is_client_error() => Err(error.message),
                Err(error) => return Err(error.into()),
            },
            Err(why) => Err(why),
        }),
    };
    let enforced = Enforced::from_parts(form.enforcement.clone(), form.unconfirmed.clone());
    let page = PoliciesPage {
        layout: signed.layout(&state, "policies").await?,
        policies: policies::service::list_policies(&state, caller).await?,
        templates: templates::catalog(),
        may_write: caller.has(Scope::GovernanceWrite),
        enforced: Some(enforced).filter(Enforced::is_known),
        dry_run: form,
        results,
    };
    Ok(page::render(&page))
}

#[derive(Deserialize)]
pub struct Switch {
    enabled: bool,
}

/// `POST /console/policies/{id}/enabled`: enables or disables the policy.
pub async fn switch(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceWrite>,
    Path(id): Path<i64>,
    Posted(form): Posted<Switch>,
) -> Result<Response, PageError> {
    let input = UpdatePolicyInput {
        enabled: Some(form.enabled),
        ..UpdatePolicyInput::default()
    };
    let (_, enforced) = enforcement::apply(
        &state,
        policies::service::update_policy(&state, &signed.caller, id, input),
    )
    .await?;
    Ok(Redirect::to(&format!("/console/policies?{}", enforced.query())).into_response())
}

/// `POST /console/policies/from-template/{template_id}`: a policy from the template,
/// created disabled.
pub async fn from_template(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceWrite>,
    Path(template_id): Path<String>,
    Posted(input): Posted<FromTemplateInput>,
) -> Result<Response, PageError> {
    let policy =
        policies::service::create_from_template(&state, &signed.caller, template_id, Some(input))
            .await?;
    Ok(Redirect::to(&format!("/console/policies#policy-{}", policy.id)).into_response())
}
