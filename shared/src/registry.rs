//! Vocabulary of the agent registry that both planes use.

use serde::{Deserialize, Serialize};

/// The LLM providers Warden governs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    Openai,
    Anthropic,
    Google,
    Nvidia,
    Bedrock,
}

impl Provider {
    pub const ALL: [Provider; 5] = [
        Provider::Openai,
        Provider::Anthropic,
        Provider::Google,
        Provider::Nvidia,
        Provider::Bedrock,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Provider::Openai => "openai",
            Provider::Anthropic => "anthropic",
            Provider::Google => "google",
            Provider::Nvidia => "nvidia",
            Provider::Bedrock => "bedrock",
        }
    }

    pub fn parse(text: &str) -> Option<Provider> {
        Provider::ALL.into_iter().find(|p| p.as_str() == text)
    }
}

/// Where an agent runs; policies may target one environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Environment {
    Production,
    Staging,
    Dev,
}

impl Environment {
    pub const fn as_str(self) -> &'static str {
        match self {
            Environment::Production => "production",
            Environment::Staging => "staging",
            Environment::Dev => "dev",
        }
    }

    pub fn parse(text: &str) -> Option<Environment> {
        [
            Environment::Production,
            Environment::Staging,
            Environment::Dev,
        ]
        .into_iter()
        .find(|e| e.as_str() == text)
    }
}

/// An agent's liveness as derived from its heartbeats (spec 3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentStatus {
    Healthy,
    Degraded,
    Down,
    Unknown,
}

impl AgentStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            AgentStatus::Healthy => "healthy",
            AgentStatus::Degraded => "degraded",
            AgentStatus::Down => "down",
            AgentStatus::Unknown => "unknown",
        }
    }

    pub fn parse(text: &str) -> Option<AgentStatus> {
        [
            AgentStatus::Healthy,
            AgentStatus::Degraded,
            AgentStatus::Down,
            AgentStatus::Unknown,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for provider in Provider::ALL {
            assert_eq!(Provider::parse(provider.as_str()), Some(provider));
        }
        assert_eq!(Environment::parse("staging"), Some(Environment::Staging));
        assert_eq!(AgentStatus::parse("down"), Some(AgentStatus::Down));
        assert_eq!(Provider::parse("azure"), None);
    }
}
