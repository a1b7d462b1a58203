//! List prices per model and the cost arithmetic, in integer micro-dollars.
//!
//! Money is kept as `i64` micro-dollars (1 USD = 1,000,000) from the price table through
//! the ledger's sums, so totals add up exactly; only the API renders dollars. Prices are
//! per million tokens, as providers publish them, dated by `PRICES_AS_OF`.

use crate::registry::Provider;

/// The date the table's list prices were taken from the providers' price pages.
pub const PRICES_AS_OF: &str = "2025-10-01";

/// One model's list price.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelPrice {
    pub provider: Provider,
    /// A model name or the prefix of a family of dated variants (`gpt-4o` matches
    /// `gpt-4o-2024-08-06`); the longest matching entry wins.
    pub model: &'static str,
    /// Micro-dollars per million input tokens.
    pub input_per_million: i64,
    /// Micro-dollars per million output tokens.
    pub output_per_million: i64,
}

const fn price(
    provider: Provider,
    model: &'static str,
    input_usd: f64,
    output_usd: f64,
) -> ModelPrice {
    ModelPrice {
        provider,
        model,
        input_per_million: (input_usd * 1_000_000.0 + 0.5) as i64,
        output_per_million: (output_usd * 1_000_000.0 + 0.5) as i64,
    }
}

use Provider::{Anthropic, Bedrock, Google, Nvidia, Openai};

/// The list prices Warden knows. An unknown model is still recorded, with cost 0 and
/// marked unpriced, never dropped.
pub const PRICES: &[ModelPrice] = &[
    price(Openai, "gpt-5", 1.25, 10.00),
    price(Openai, "gpt-5-mini", 0.25, 2.00),
    price(Openai, "gpt-5-nano", 0.05, 0.40),
    price(Openai, "gpt-4.1", 2.00, 8.00),
    price(Openai, "gpt-4.1-mini", 0.40, 1.60),
    price(Openai, "gpt-4.1-nano", 0.10, 0.40),
    price(Openai, "gpt-4o", 2.50, 10.00),
    price(Openai, "gpt-4o-mini", 0.15, 0.60),
    price(Openai, "o3", 2.00, 8.00),
    price(Openai, "o4-mini", 1.10, 4.40),
    price(Openai, "text-embedding-3-small", 0.02, 0.0),
    price(Openai, "text-embedding-3-large", 0.13, 0.0),
    price(Anthropic, "claude-opus-4", 15.00, 75.00),
    price(Anthropic, "claude-sonnet-4", 3.00, 15.00),
    price(Anthropic, "claude-haiku-4-5", 1.00, 5.00),
    price(Anthropic, "claude-3-7-sonnet", 3.00, 15.00),
    price(Anthropic, "claude-3-5-haiku", 0.80, 4.00),
    price(Google, "gemini-2.5-pro", 1.25, 10.00),
    price(Google, "gemini-2.5-flash", 0.30, 2.50),
    price(Google, "gemini-2.5-flash-lite", 0.10, 0.40),
    price(Google, "gemini-2.0-flash", 0.10, 0.40),
    price(Google, "text-embedding-004", 0.0, 0.0),
    price(Nvidia, "meta/llama-3.1-8b-instruct", 0.05, 0.05),
    price(Nvidia, "meta/llama-3.1-70b-instruct", 0.35, 0.40),
    price(Nvidia, "meta/llama-3.1-405b-instruct", 1.79, 1.79),
    price(Nvidia, "nvidia/llama-3.1-nemotron-70b-instruct", 0.35, 0.40),
    price(Bedrock, "anthropic.claude-sonnet-4", 3.00, 15.00),
    price(Bedrock, "anthropic.claude-3-5-sonnet", 3.00, 15.00),
    price(Bedrock, "anthropic.claude-3-5-haiku", 0.80, 4.00),
    price(Bedrock, "amazon.nova-pro", 0.80, 3.20),
    price(Bedrock, "amazon.nova-lite", 0.06, 0.24),
    price(Bedrock, "amazon.nova-micro", 0.035, 0.14),
    price(Bedrock, "meta.llama3-1-70b-instruct", 0.72, 0.72),
];

/// The price of `model` at `provider`: the longest table entry the name starts with.
pub fn find_price(provider: Provider, model: &str) -> Option<&'static ModelPrice> {
    find_price_in(PRICES, provider, model)
}

/// [`find_price`] in another table (a declared provider's).
pub fn find_price_in(
    table: &'static [ModelPrice],
    provider: Provider,
    model: &str,
) -> Option<&'static ModelPrice> {
    table
        .iter()
        .filter(|p| p.provider == provider && model.starts_with(p.model))
        .filter(|p| {
            // `gpt-4o` must not price `gpt-4o-mini`: the rest must start a new segment.
            let rest = &model[p.model.len()..];
            rest.is_empty() || rest.starts_with(['-', ':', '@', '.', '/'])
        })
        .max_by_key(|p| p.model.len())
}

/// The cost of a request in micro-dollars, rounded half up to the micro-dollar.
pub fn cost_micros(price: &ModelPrice, input_tokens: i64, output_tokens: i64) -> i64 {
    let total = i128::from(input_tokens.max(0)) * i128::from(price.input_per_million)
        + i128::from(output_tokens.max(0)) * i128::from(price.output_per_million);
    i64::try_from((total + 500_000) / 1_000_000).unwrap_or(i64::MAX)
}

/// Dollars (as sent by clients) to micro-dollars, rounded to the nearest micro-dollar.
pub fn usd_to_micros(usd: f64) -> i64 {
    (usd * 1_000_000.0).round() as i64
}

/// Micro-dollars to dollars for rendering.
pub fn micros_to_usd(micros: i64) -> f64 {
    micros as f64 / 1_000_000.0
}

/// Micro-dollars as an exact decimal string of dollars with six places (`"12.345678"`),
/// for the fields the API renders as strings.
pub fn micros_to_decimal(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let magnitude = micros.unsigned_abs();
    format!(
        "{sign}{}.{:06}",
        magnitude / 1_000_000,
        magnitude % 1_000_000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_exact() {
        assert_eq!(micros_to_decimal(0), "0.000000");
        assert_eq!(micros_to_decimal(12_345_678), "12.345678");
        assert_eq!(micros_to_decimal(5), "0.000005");
        assert_eq!(micros_to_decimal(-1_500_000), "-1.500000");
        assert_eq!(micros_to_decimal(i64::MIN), "-9223372036854.775808");
    }

    #[test]
    fn dated_variants_match_their_family_but_not_a_longer_sibling() {
        let p = find_price(Openai, "gpt-4o-2024-08-06").map(|p| p.model);
        assert_eq!(p, Some("gpt-4o"));
        assert_eq!(
            find_price(Openai, "gpt-4o-mini").map(|p| p.model),
            Some("gpt-4o-mini")
        );
        assert_eq!(find_price(Openai, "gpt-4omega"), None);
        assert_eq!(find_price(Anthropic, "gpt-4o"), None);
        assert_eq!(
            find_price(Bedrock, "anthropic.claude-3-5-sonnet-20240620-v1:0").map(|p| p.model),
            Some("anthropic.claude-3-5-sonnet")
        );
    }

    #[test]
    fn cost_is_exact_in_micro_dollars() {
        let gpt4o = find_price(Openai, "gpt-4o").copied();
        assert!(gpt4o.is_some());
        if let Some(price) = gpt4o {
            // 1,000 input at $2.50/M and 500 output at $10/M = $0.0025 + $0.005.
            assert_eq!(cost_micros(&price, 1_000, 500), 7_500);
            assert_eq!(cost_micros(&price, 1, 0), 3); // 2.5 micro-dollars rounds up
            assert_eq!(cost_micros(&price, 0, 0), 0);
        }
        assert_eq!(usd_to_micros(0.0075), 7_500);
        assert!((micros_to_usd(7_500) - 0.0075).abs() < 1e-12);
    }

    #[test]
    fn table_prices_are_whole_micro_dollars_of_the_published_figures() {
        let nova = find_price(Bedrock, "amazon.nova-micro-v1:0").copied();
        assert_eq!(
            nova.map(|p| (p.input_per_million, p.output_per_million)),
            Some((35_000, 140_000))
        );
        let llama = find_price(Nvidia, "meta/llama-3.1-70b-instruct").copied();
        assert_eq!(llama.map(|p| p.input_per_million), Some(350_000));
    }

    #[test]
    fn every_provider_has_prices() {
        for provider in Provider::BUILT_IN {
            assert!(
                PRICES.iter().any(|p| p.provider == provider),
                "{provider:?}"
            );
        }
    }
}
