//! Which provider serves a request, from the model name and the key's allowed providers.
//!
//! 1. An explicit `provider/model` (`anthropic/claude-sonnet-4-5`, `local-vllm/qwen3`)
//!    names a built-in or declared provider; the provider receives `model`. (`nvidia/...`
//!    is NVIDIA's own namespace and is sent unchanged, as are other `vendor/model` ids,
//!    which are NVIDIA-hosted models.)
//! 2. A model a declared provider lists (`providers.custom.<name>.models`) goes there:
//!    the operator's word beats the family rules (a vLLM server's
//!    `meta-llama/Llama-3.1-8B-Instruct` would otherwise look NVIDIA's).
//! 3. Otherwise the model's family names it: `gpt-`, `o1`/`o3`/`o4`, `text-embedding-`,
//!    ... OpenAI; `claude-` Anthropic; `gemini-`, `gemma-` Google; dotted Bedrock ids
//!    (`anthropic.claude-...`, `amazon.nova-...`, `us.meta.llama...`) Bedrock;
//!    `vendor/model` NVIDIA.
//! 4. A model of no known family goes to the key's only allowed provider when it has
//!    exactly one, else to OpenAI (the protocol's home).
//!
//! The result must be among the key's allowed providers (all, when it lists none).

use warden_shared::catalog::ProviderCatalog;
use warden_shared::registry::Provider;

/// Where a request goes and the model name the provider receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub provider: Provider,
    pub upstream_model: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteError {
    /// The provider the model belongs to is not among the key's allowed providers.
    ProviderNotAllowed(Provider),
}

pub fn route(
    model: &str,
    allowed: &[Provider],
    catalog: &ProviderCatalog,
) -> Result<Route, RouteError> {
    let (provider, upstream_model) = match explicit(model, catalog) {
        Some((provider, rest)) => (provider, rest.to_owned()),
        None => {
            let provider = catalog.provider_serving(model).or_else(|| family(model));
            let provider = provider.unwrap_or(match allowed {
                [only] => *only,
                _ => Provider::Openai,
            });
            (provider, model.to_owned())
        }
    };
    if !allowed.is_empty() && !allowed.contains(&provider) {
        return Err(RouteError::ProviderNotAllowed(provider));
    }
    Ok(Route {
        provider,
        upstream_model,
    })
}

fn explicit<'m>(model: &'m str, catalog: &ProviderCatalog) -> Option<(Provider, &'m str)> {
    let (prefix, rest) = model.split_once('/')?;
    match Provider::parse(prefix)? {
        // NVIDIA's catalogue itself uses `nvidia/...` ids.
        Provider::Nvidia => None,
        // `meta/llama-...` is a model id, not a provider nobody declared.
        provider if !catalog.knows(provider) => None,
        provider if !rest.is_empty() => Some((provider, rest)),
        _ => None,
    }
}

fn family(model: &str) -> Option<Provider> {
    const OPENAI: [&str; 9] = [
        "gpt-",
        "o1",
        "o3",
        "o4",
        "chatgpt-",
        "text-embedding-",
        "omni-moderation",
        "davinci",
        "babbage",
    ];
    const BEDROCK_VENDORS: [&str; 9] = [
        "anthropic.",
        "amazon.",
        "meta.",
        "cohere.",
        "mistral.",
        "ai21.",
        "deepseek.",
        "openai.",
        "writer.",
    ];
    let lower = model.to_ascii_lowercase();
    if OPENAI.iter().any(|prefix| lower.starts_with(prefix)) {
        return Some(Provider::Openai);
    }
    if lower.starts_with("claude-") {
        return Some(Provider::Anthropic);
    }
    if lower.starts_with("gemini-") || lower.starts_with("gemma-") {
        return Some(Provider::Google);
    }
    // Cross-region inference profiles prefix a region group: `us.anthropic.claude-...`.
    let unprefixed = ["us.", "eu.", "apac.", "global."]
        .iter()
        .find_map(|region| lower.strip_prefix(region))
        .unwrap_or(&lower);
    if BEDROCK_VENDORS.iter().any(|v| unprefixed.starts_with(v)) {
        return Some(Provider::Bedrock);
    }
    if lower.contains('/') {
        return Some(Provider::Nvidia);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(model: &str, allowed: &[Provider]) -> Result<Route, RouteError> {
        super::route(model, allowed, &ProviderCatalog::default())
    }

    fn provider_of(model: &str) -> Option<Provider> {
        route(model, &[]).ok().map(|r| r.provider)
    }

    #[test]
    fn families_name_their_provider() {
        assert_eq!(provider_of("gpt-4o-mini"), Some(Provider::Openai));
        assert_eq!(provider_of("o4-mini"), Some(Provider::Openai));
        assert_eq!(
            provider_of("text-embedding-3-small"),
            Some(Provider::Openai)
        );
        assert_eq!(provider_of("claude-sonnet-4-5"), Some(Provider::Anthropic));
        assert_eq!(provider_of("gemini-2.5-flash"), Some(Provider::Google));
        assert_eq!(
            provider_of("anthropic.claude-3-haiku-20240307-v1:0"),
            Some(Provider::Bedrock)
        );
        assert_eq!(
            provider_of("us.meta.llama3-1-70b-instruct-v1:0"),
            Some(Provider::Bedrock)
        );
        assert_eq!(
            provider_of("meta/llama-3.1-70b-instruct"),
            Some(Provider::Nvidia)
        );
        assert_eq!(
            provider_of("nvidia/llama-3.1-nemotron-70b-instruct"),
            Some(Provider::Nvidia)
        );
        assert_eq!(provider_of("my-finetune"), Some(Provider::Openai));
    }

    #[test]
    fn an_explicit_provider_wins_and_is_stripped() {
        let anthropic = route("anthropic/claude-haiku-4-5", &[]).ok();
        assert_eq!(
            anthropic,
            Some(Route {
                provider: Provider::Anthropic,
                upstream_model: "claude-haiku-4-5".into()
            })
        );
        let nvidia = route("nvidia/llama-3.1-nemotron-70b-instruct", &[]).ok();
        assert_eq!(
            nvidia.map(|r| r.upstream_model),
            Some("nvidia/llama-3.1-nemotron-70b-instruct".into())
        );
    }

    #[test]
    fn the_keys_allowed_providers_decide_and_restrict() {
        assert_eq!(
            route("my-finetune", &[Provider::Nvidia]).map(|r| r.provider),
            Ok(Provider::Nvidia)
        );
        assert_eq!(
            route("gpt-4o", &[Provider::Anthropic]),
            Err(RouteError::ProviderNotAllowed(Provider::Openai))
        );
        assert_eq!(
            route("openai/gpt-4o", &[Provider::Openai, Provider::Google]).map(|r| r.provider),
            Ok(Provider::Openai)
        );
    }

    #[test]
    fn declared_providers_are_reached_by_prefix_or_by_their_listed_models() {
        let local = Provider::parse("local").expect("name");
        let catalog = ProviderCatalog::new([(
            local,
            vec!["meta-llama/Llama-3.1-8B-Instruct".to_owned()],
            vec![],
        )])
        .expect("valid");
        let routed = |model: &str, allowed: &[Provider]| {
            super::route(model, allowed, &catalog).map(|r| (r.provider, r.upstream_model))
        };
        assert_eq!(
            routed("local/qwen3:8b", &[]),
            Ok((local, "qwen3:8b".to_owned()))
        );
        assert_eq!(
            routed("meta-llama/Llama-3.1-8B-Instruct", &[]),
            Ok((local, "meta-llama/Llama-3.1-8B-Instruct".to_owned()))
        );
        assert_eq!(
            routed("qwen3:8b", &[local]),
            Ok((local, "qwen3:8b".to_owned()))
        );
        assert_eq!(
            routed("local/qwen3", &[Provider::Openai]),
            Err(RouteError::ProviderNotAllowed(local))
        );
        // A prefix nobody declared is part of the model's id, as before.
        assert_eq!(
            routed("mistralai/mixtral-8x7b", &[]).map(|(p, _)| p),
            Ok(Provider::Nvidia)
        );
    }
}
