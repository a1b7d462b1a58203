//! Whether a key may make a request, from memory only: the key, its agent and tenant,
//! the route, and the key's model list (which `GET /v1/models` lists).

use serde_json::{json, Value};
use warden_shared::catalog::ProviderCatalog;
use warden_shared::pricing::{self, ModelPrice};
use warden_shared::registry::Provider;

use crate::refusal::Refusal;
use crate::routing::{self, Route, RouteError};
use crate::state::KeyView;

/// What the proxy needs to forward an admitted request.
#[derive(Debug, Clone)]
pub struct Admitted {
    pub route: Route,
    /// The model the client asked for (before overrides), as recorded in usage.
    pub requested_model: String,
    /// The price of the routed model, looked up once for the budget, usage and metrics.
    pub price: Option<&'static ModelPrice>,
}

impl Admitted {
    /// What `tokens` of the routed model cost; 0 when it is not in the price table.
    pub fn cost_micros(&self, input_tokens: i64, output_tokens: i64) -> i64 {
        self.price.map_or(0, |price| {
            pricing::cost_micros(price, input_tokens, output_tokens)
        })
    }
}

/// Checks the key and agent flags only (for requests without a model, e.g. `/v1/models`).
pub fn check_key(view: &KeyView, now_ms: i64) -> Result<(), Refusal> {
    if view.key.expires_at.is_some_and(|at| at <= now_ms) {
        return Err(Refusal::KeyExpired);
    }
    let Some(tenant) = &view.tenant else {
        return Err(Refusal::InvalidKey);
    };
    if tenant.plan == "free" {
        return Err(Refusal::PlanWithoutProxy);
    }
    let Some(agent) = &view.agent else {
        return Err(Refusal::AgentNotFound);
    };
    // Quarantine is checked first: it is the stronger, investigative state.
    if agent.quarantined {
        return Err(Refusal::AgentQuarantined);
    }
    if agent.blocked {
        return Err(Refusal::AgentBlocked);
    }
    if agent.expires_at.is_some_and(|at| at <= now_ms) {
        return Err(Refusal::AgentExpired);
    }
    Ok(())
}

/// Admits a request for `model` by a key that passed [`check_key`], or says why not.
/// The key is checked first and apart, before the body (and so the model) is read.
pub fn admit(view: &KeyView, model: &str, catalog: &ProviderCatalog) -> Result<Admitted, Refusal> {
    let key = &view.key;
    if !key.allowed_models.is_empty() && !key.allowed_models.iter().any(|m| m == model) {
        return Err(Refusal::ModelNotAllowed(model.to_owned()));
    }
    let overridden = key.model_overrides.get(model).map_or(model, String::as_str);
    let route = routing::route(overridden, &key.allowed_providers, catalog).map_err(
        |RouteError::ProviderNotAllowed(provider)| Refusal::ProviderNotAllowed(provider),
    )?;
    Ok(Admitted {
        price: catalog.find_price(route.provider, &route.upstream_model),
        route,
        requested_model: model.to_owned(),
    })
}

/// `GET /v1/models`: the models this key may use, in a list both SDK families read:
/// OpenAI's (`object`, `data[].{id, object, created, owned_by}`) and Anthropic's
/// (`data[].{id, type, display_name, created_at}`, `has_more`, `first_id`, `last_id`).
///
/// Without a model list of its own, a key lists the priced models of its providers and
/// the models declared providers name (prices' families, listed models).
pub fn model_list(view: &KeyView, catalog: &ProviderCatalog) -> String {
    let providers = allowed_providers(view, catalog);
    let models: Vec<(String, String)> = if view.key.allowed_models.is_empty() {
        let built_in = pricing::PRICES
            .iter()
            .filter(|price| providers.contains(&price.provider))
            .map(|price| (price.model.to_owned(), price.provider.to_string()));
        let declared = catalog
            .declared()
            .iter()
            .filter(|declared| providers.contains(&declared.provider))
            .flat_map(|declared| {
                let owner = declared.provider.to_string();
                let listed = declared.models.iter().cloned();
                let priced = declared.prices.iter().map(|p| p.model.to_owned());
                let mut names: Vec<String> = listed.chain(priced).collect();
                names.sort();
                names.dedup();
                names.into_iter().map(move |name| (name, owner.clone()))
            });
        built_in.chain(declared).collect()
    } else {
        view.key
            .allowed_models
            .iter()
            .map(|model| {
                let owner = routing::route(model, &providers, catalog)
                    .map_or_else(|_| "unknown".to_owned(), |route| route.provider.to_string());
                (model.clone(), owner)
            })
            .collect()
    };
    let (first_id, last_id) = (
        models.first().map(|(id, _)| id.clone()),
        models.last().map(|(id, _)| id.clone()),
    );
    let data: Vec<Value> = models
        .into_iter()
        .map(|(id, owner)| {
            json!({ "id": id, "object": "model", "created": 0, "owned_by": owner,
                    "type": "model", "display_name": id, "created_at": "1970-01-01T00:00:00Z" })
        })
        .collect();
    json!({ "object": "list", "data": data, "has_more": false,
            "first_id": first_id, "last_id": last_id })
    .to_string()
}

/// The providers a key may use, for `/v1/models`.
fn allowed_providers(view: &KeyView, catalog: &ProviderCatalog) -> Vec<Provider> {
    if view.key.allowed_providers.is_empty() {
        let declared = catalog.declared().iter().map(|d| d.provider);
        Provider::BUILT_IN.into_iter().chain(declared).collect()
    } else {
        view.key.allowed_providers.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use warden_shared::snapshot::{AgentState, ProxyKeyState, TenantState};

    use super::*;

    fn view(blocked: bool, quarantined: bool) -> KeyView {
        KeyView {
            key: Arc::new(ProxyKeyState {
                id: "k".into(),
                key_hash: "h".into(),
                tenant_id: "t".into(),
                agent_id: "a".into(),
                team_id: None,
                allowed_providers: vec![Provider::Openai],
                allowed_models: vec!["gpt-4o".into(), "gpt-4o-mini".into()],
                model_overrides: [("gpt-4o".to_owned(), "gpt-4o-mini".to_owned())].into(),
                requests_per_minute: None,
                tokens_per_minute: None,
                budget_limit_micros: None,
                use_managed_key: false,
                expires_at: Some(1_000),
            }),
            agent: Some(Arc::new(AgentState {
                id: "a".into(),
                tenant_id: "t".into(),
                name: "a".into(),
                team_id: None,
                environment: "production".into(),
                blocked,
                quarantined,
                expires_at: Some(500),
            })),
            tenant: Some(Arc::new(TenantState {
                id: "t".into(),
                plan: "starter".into(),
            })),
        }
    }

    #[test]
    fn each_block_reason_has_its_refusal() {
        assert_eq!(
            check_key(&view(true, false), 0).err(),
            Some(Refusal::AgentBlocked)
        );
        assert_eq!(
            check_key(&view(false, true), 0).err(),
            Some(Refusal::AgentQuarantined)
        );
        assert_eq!(
            check_key(&view(false, false), 1_000).err(),
            Some(Refusal::KeyExpired)
        );
        assert_eq!(
            admit(
                &view(false, false),
                "claude-sonnet-4-5",
                &ProviderCatalog::default()
            )
            .err(),
            Some(Refusal::ModelNotAllowed("claude-sonnet-4-5".into()))
        );
        assert_eq!(
            check_key(&view(false, false), 500).err(),
            Some(Refusal::AgentExpired)
        );
        assert_eq!(check_key(&view(false, false), 499).err(), None);
        let mut no_agent = view(false, false);
        no_agent.agent = None;
        assert_eq!(check_key(&no_agent, 0).err(), Some(Refusal::AgentNotFound));
    }

    #[test]
    fn overrides_apply_after_the_allowlist() {
        let admitted = admit(&view(false, false), "gpt-4o", &ProviderCatalog::default()).ok();
        assert_eq!(
            admitted.as_ref().map(|a| a.route.upstream_model.as_str()),
            Some("gpt-4o-mini")
        );
        assert_eq!(admitted.map(|a| a.requested_model), Some("gpt-4o".into()));
    }
}
