//! The EU AI Act's risk tiers: what `risk` classifies agents into and `agents` filters
//! them by (here, below both, so neither imports the other).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// An EU AI Act risk tier, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RiskLevel {
    Minimal,
    Limited,
    High,
    Prohibited,
}

impl RiskLevel {
    pub const fn as_str(self) -> &'static str {
        match self {
            RiskLevel::Minimal => "minimal",
            RiskLevel::Limited => "limited",
            RiskLevel::High => "high",
            RiskLevel::Prohibited => "prohibited",
        }
    }

    pub fn parse(text: &str) -> Option<RiskLevel> {
        [
            RiskLevel::Minimal,
            RiskLevel::Limited,
            RiskLevel::High,
            RiskLevel::Prohibited,
        ]
        .into_iter()
        .find(|level| level.as_str() == text)
    }
}
