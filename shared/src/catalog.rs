//! The providers a deployment declares beyond the built-ins (`providers.custom.<name>`):
//! which names the control plane accepts, which models are routed to each without a
//! `name/` prefix, and their prices. Both planes build it from the same configuration.

use crate::pricing::{self, ModelPrice};
use crate::registry::Provider;

/// The built-in providers plus the declared ones.
#[derive(Debug, Clone, Default)]
pub struct ProviderCatalog {
    declared: Vec<DeclaredProvider>,
}

/// One declared provider, as the catalog knows it.
#[derive(Debug, Clone)]
pub struct DeclaredProvider {
    pub provider: Provider,
    /// Model names routed to this provider when requested without its `name/` prefix.
    pub models: Vec<String>,
    /// Its prices, matched like the built-in table's (longest name the model starts
    /// with); a model without one is recorded unpriced.
    pub prices: &'static [ModelPrice],
}

/// A declared price, in US dollars per million tokens, as the configuration gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredPrice {
    pub model: String,
    pub input_per_million_usd: f64,
    pub output_per_million_usd: f64,
}

/// The highest price per million tokens a declaration may give: far above any list price,
/// low enough that cost arithmetic stays exact.
const MAX_PRICE_USD: f64 = 100_000.0;

impl ProviderCatalog {
    /// The catalog of these declarations, or what is wrong with one of them. Declared
    /// prices live as long as the process (they are read once, at start), so prices from
    /// the configuration and the built-in table are handled alike, as `&'static`.
    pub fn new(
        declarations: impl IntoIterator<Item = (Provider, Vec<String>, Vec<DeclaredPrice>)>,
    ) -> Result<ProviderCatalog, String> {
        let mut declared = Vec::new();
        for (provider, models, prices) in declarations {
            if provider.is_built_in() {
                return Err(format!("`{provider}` is a built-in provider's name"));
            }
            let mut table = Vec::with_capacity(prices.len());
            for price in prices {
                table.push(model_price(provider, price)?);
            }
            declared.push(DeclaredProvider {
                provider,
                models,
                prices: Box::leak(table.into_boxed_slice()),
            });
        }
        Ok(ProviderCatalog { declared })
    }

    pub fn declared(&self) -> &[DeclaredProvider] {
        &self.declared
    }

    /// Whether `provider` is built in or declared here.
    pub fn knows(&self, provider: Provider) -> bool {
        provider.is_built_in() || self.declared.iter().any(|d| d.provider == provider)
    }

    /// The declared provider that serves `model` by name, if one lists it.
    pub fn provider_serving(&self, model: &str) -> Option<Provider> {
        self.declared
            .iter()
            .find(|d| d.models.iter().any(|m| m == model))
            .map(|d| d.provider)
    }

    /// The price of `model` at `provider`: the built-in table's for a built-in provider,
    /// the declaration's for a declared one.
    pub fn find_price(&self, provider: Provider, model: &str) -> Option<&'static ModelPrice> {
        if provider.is_built_in() {
            return pricing::find_price(provider, model);
        }
        let declared = self.declared.iter().find(|d| d.provider == provider)?;
        pricing::find_price_in(declared.prices, provider, model)
    }
}

fn model_price(provider: Provider, price: DeclaredPrice) -> Result<ModelPrice, String> {
    let DeclaredPrice {
        model,
        input_per_million_usd: input,
        output_per_million_usd: output,
    } = price;
    if model.is_empty() || model.len() > 200 {
        return Err(format!(
            "a price of `{provider}` names no model (1 to 200 characters)"
        ));
    }
    for usd in [input, output] {
        if !(0.0..=MAX_PRICE_USD).contains(&usd) {
            return Err(format!(
                "the price of `{provider}`'s `{model}` must be 0 to {MAX_PRICE_USD} US dollars \
                 per million tokens"
            ));
        }
    }
    Ok(ModelPrice {
        provider,
        model: model.leak(),
        input_per_million: pricing::usd_to_micros(input),
        output_per_million: pricing::usd_to_micros(output),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> Provider {
        Provider::parse("local").expect("name")
    }

    fn price(model: &str, input: f64, output: f64) -> DeclaredPrice {
        DeclaredPrice {
            model: model.to_owned(),
            input_per_million_usd: input,
            output_per_million_usd: output,
        }
    }

    #[test]
    fn declared_models_route_and_price_like_the_built_in_table() {
        let catalog = ProviderCatalog::new([(
            local(),
            vec!["llama3.1:8b".to_owned()],
            vec![price("llama3.1", 0.1, 0.2)],
        )])
        .expect("valid");
        assert!(catalog.knows(local()));
        assert!(catalog.knows(Provider::Openai));
        assert!(!catalog.knows(Provider::parse("other").expect("name")));
        assert_eq!(catalog.provider_serving("llama3.1:8b"), Some(local()));
        assert_eq!(catalog.provider_serving("llama3.1"), None);
        let found = catalog.find_price(local(), "llama3.1:8b").copied();
        assert_eq!(
            found.map(|p| (p.model, p.input_per_million, p.output_per_million)),
            Some(("llama3.1", 100_000, 200_000))
        );
        assert_eq!(catalog.find_price(local(), "mistral"), None);
        assert_eq!(catalog.find_price(local(), "gpt-4o"), None);
        assert!(catalog.find_price(Provider::Openai, "gpt-4o").is_some());
    }

    #[test]
    fn a_bad_declaration_is_refused() {
        for bad in [
            price("m", -1.0, 0.0),
            price("m", 0.0, f64::NAN),
            price("", 1.0, 1.0),
        ] {
            assert!(ProviderCatalog::new([(local(), vec![], vec![bad])]).is_err());
        }
        assert!(ProviderCatalog::new([(Provider::Openai, vec![], vec![])]).is_err());
    }
}
