//! Vocabulary of the agent registry that both planes use.

use serde::{Deserialize, Serialize};

/// The LLM providers Warden governs: the five built-ins, whose protocols and endpoints
/// Warden knows, and the providers an operator declares (`providers.custom.<name>`, a
/// local vLLM or Ollama server, say), which speak OpenAI's protocol.
///
/// Names are the wire form (`openai`, `local-vllm`). Any well-formed name reads as a
/// provider, so that state, stored usage and snapshots never fail on a name another
/// replica's configuration declares; the control plane checks the names its API accepts
/// against the declared ones (`ProviderCatalog`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Provider {
    Openai,
    Anthropic,
    Google,
    Nvidia,
    Bedrock,
    /// A provider the operator declared under this name.
    Operator(ProviderName),
    /// Not a model provider: the MCP gateway. A tool call is decided, recorded and
    /// approved as a request to `mcp` whose "model" is the tool's prefixed name
    /// (`github__create_issue`), so policies, approvals and decision records treat tool
    /// calls with the same machinery as model calls. Never routed to, never priced, and
    /// not a name the API accepts where a model provider is meant.
    Mcp,
}

impl Provider {
    /// The built-in providers.
    pub const BUILT_IN: [Provider; 5] = [
        Provider::Openai,
        Provider::Anthropic,
        Provider::Google,
        Provider::Nvidia,
        Provider::Bedrock,
    ];

    pub fn as_str(&self) -> &str {
        match self {
            Provider::Openai => "openai",
            Provider::Anthropic => "anthropic",
            Provider::Google => "google",
            Provider::Nvidia => "nvidia",
            Provider::Bedrock => "bedrock",
            Provider::Operator(name) => name.as_str(),
            Provider::Mcp => "mcp",
        }
    }

    /// The provider of this name: a built-in's, or an operator's when the name is well
    /// formed ([`ProviderName::parse`]).
    pub fn parse(text: &str) -> Option<Provider> {
        Provider::BUILT_IN
            .into_iter()
            .find(|p| p.as_str() == text)
            .or_else(|| (text == "mcp").then_some(Provider::Mcp))
            .or_else(|| ProviderName::parse(text).map(Provider::Operator))
    }

    pub const fn is_built_in(&self) -> bool {
        !matches!(self, Provider::Operator(_) | Provider::Mcp)
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Provider {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Provider {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Provider::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "`{text}` is not a provider name (`openai`, `anthropic`, `google`, `nvidia`, \
                 `bedrock` or a declared provider's name: 1 to {} lowercase letters, digits, \
                 `-` or `_`, starting with a letter)",
                ProviderName::MAX_LEN
            ))
        })
    }
}

/// An operator-declared provider's name: 1 to 32 lowercase ASCII letters, digits, `-` or
/// `_`, starting with a letter, and not a built-in's (nor `mcp`, the gateway's). Held inline so that [`Provider`]
/// stays `Copy` and the request path allocates nothing for it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProviderName {
    len: u8,
    bytes: [u8; ProviderName::MAX_LEN],
}

impl ProviderName {
    pub const MAX_LEN: usize = 32;

    pub fn parse(text: &str) -> Option<ProviderName> {
        let well_formed = (1..=Self::MAX_LEN).contains(&text.len())
            && text.starts_with(|c: char| c.is_ascii_lowercase())
            && text
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        let built_in = Provider::BUILT_IN.iter().any(|p| p.as_str() == text) || text == "mcp";
        if !well_formed || built_in {
            return None;
        }
        let mut bytes = [0; Self::MAX_LEN];
        bytes[..text.len()].copy_from_slice(text.as_bytes());
        Some(ProviderName {
            len: text.len() as u8,
            bytes,
        })
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII is ever stored (see `parse`).
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl std::fmt::Debug for ProviderName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
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
    pub const ALL: [Environment; 3] = [
        Environment::Production,
        Environment::Staging,
        Environment::Dev,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Environment::Production => "production",
            Environment::Staging => "staging",
            Environment::Dev => "dev",
        }
    }

    pub fn parse(text: &str) -> Option<Environment> {
        Environment::ALL.into_iter().find(|e| e.as_str() == text)
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
        for provider in Provider::BUILT_IN {
            assert_eq!(Provider::parse(provider.as_str()), Some(provider));
        }
        assert_eq!(Environment::parse("staging"), Some(Environment::Staging));
        assert_eq!(AgentStatus::parse("down"), Some(AgentStatus::Down));
    }

    #[test]
    fn operator_names_are_well_formed_and_never_a_built_ins() {
        let local = Provider::parse("local-vllm_2").expect("well formed");
        assert_eq!(local.as_str(), "local-vllm_2");
        assert!(!local.is_built_in());
        assert_eq!(
            serde_json::from_str::<Provider>("\"local-vllm_2\"").ok(),
            Some(local)
        );
        assert_eq!(
            serde_json::to_string(&local).ok().as_deref(),
            Some("\"local-vllm_2\"")
        );
        assert!(ProviderName::parse("openai").is_none());
        assert!(Provider::parse(&"a".repeat(32)).is_some());
        for bad in [
            "",
            "Local",
            "2local",
            "local/x",
            "local.x",
            "lo cal",
            &"a".repeat(33),
            "é",
        ] {
            assert_eq!(Provider::parse(bad), None, "{bad:?}");
            assert!(serde_json::from_str::<Provider>(&format!("{bad:?}")).is_err());
        }
    }
}
