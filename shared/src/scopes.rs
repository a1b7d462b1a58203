//! Scopes, the key types built from them, and the rules for granting them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One permission a credential may hold (spec section 5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Scope {
    #[serde(rename = "registry:read")]
    RegistryRead,
    #[serde(rename = "registry:write")]
    RegistryWrite,
    #[serde(rename = "telemetry:write")]
    TelemetryWrite,
    #[serde(rename = "monitoring:read")]
    MonitoringRead,
    #[serde(rename = "cost:read")]
    CostRead,
    #[serde(rename = "anomaly:read")]
    AnomalyRead,
    #[serde(rename = "anomaly:write")]
    AnomalyWrite,
    #[serde(rename = "governance:read")]
    GovernanceRead,
    #[serde(rename = "governance:write")]
    GovernanceWrite,
    #[serde(rename = "proxy:forward")]
    ProxyForward,
    #[serde(rename = "admin")]
    Admin,
    #[serde(rename = "platform:admin")]
    PlatformAdmin,
    #[serde(rename = "payload:read")]
    PayloadRead,
    #[serde(rename = "payload:write")]
    PayloadWrite,
}

impl Scope {
    pub const ALL: [Scope; 14] = [
        Scope::RegistryRead,
        Scope::RegistryWrite,
        Scope::TelemetryWrite,
        Scope::MonitoringRead,
        Scope::CostRead,
        Scope::AnomalyRead,
        Scope::AnomalyWrite,
        Scope::GovernanceRead,
        Scope::GovernanceWrite,
        Scope::ProxyForward,
        Scope::Admin,
        Scope::PlatformAdmin,
        Scope::PayloadRead,
        Scope::PayloadWrite,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::RegistryRead => "registry:read",
            Scope::RegistryWrite => "registry:write",
            Scope::TelemetryWrite => "telemetry:write",
            Scope::MonitoringRead => "monitoring:read",
            Scope::CostRead => "cost:read",
            Scope::AnomalyRead => "anomaly:read",
            Scope::AnomalyWrite => "anomaly:write",
            Scope::GovernanceRead => "governance:read",
            Scope::GovernanceWrite => "governance:write",
            Scope::ProxyForward => "proxy:forward",
            Scope::Admin => "admin",
            Scope::PlatformAdmin => "platform:admin",
            Scope::PayloadRead => "payload:read",
            Scope::PayloadWrite => "payload:write",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = UnknownScope;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s)
            .ok_or_else(|| UnknownScope(s.to_owned()))
    }
}

/// A scope name that Warden does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownScope(pub String);

impl fmt::Display for UnknownScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown scope `{}`", self.0)
    }
}

impl std::error::Error for UnknownScope {}

/// Whether a credential holding `held` may use a route that requires `required`.
///
/// `admin` is full access to the tenant: it satisfies every scope except
/// `platform:admin`, which only platform operators hold. `platform:admin` itself is not
/// tenant access; a platform operator manages tenants, not their agents.
pub fn satisfies(held: &[Scope], required: Scope) -> bool {
    held.contains(&required) || (required != Scope::PlatformAdmin && held.contains(&Scope::Admin))
}

/// Whether a credential holding `held` may grant `wanted` to a new key (spec 5.5): a
/// `platform:admin` key may grant any scope, an `admin` key every scope except
/// `platform:admin`, any other key only scopes it holds itself.
pub fn may_grant(held: &[Scope], wanted: Scope) -> bool {
    if held.contains(&Scope::PlatformAdmin) {
        return true;
    }
    if held.contains(&Scope::Admin) {
        return wanted != Scope::PlatformAdmin;
    }
    held.contains(&wanted)
}

/// The three key types of spec 5.3, each a fixed set of scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyType {
    /// Full access to the tenant.
    Admin,
    /// Forwards LLM requests through the proxy and reads agent data.
    Proxy,
    /// Reads agents, cost, monitoring, anomalies and governance records; no writes.
    ReadOnly,
}

impl KeyType {
    pub fn scopes(self) -> &'static [Scope] {
        match self {
            KeyType::Admin => &[Scope::Admin],
            KeyType::Proxy => &[Scope::ProxyForward, Scope::RegistryRead],
            KeyType::ReadOnly => &[
                Scope::RegistryRead,
                Scope::MonitoringRead,
                Scope::CostRead,
                Scope::AnomalyRead,
                Scope::GovernanceRead,
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_names_round_trip() {
        for scope in Scope::ALL {
            assert_eq!(scope.as_str().parse::<Scope>(), Ok(scope));
        }
        assert!("registry:delete".parse::<Scope>().is_err());
    }

    #[test]
    fn admin_satisfies_tenant_scopes_but_not_platform_admin() {
        assert!(satisfies(&[Scope::Admin], Scope::RegistryWrite));
        assert!(!satisfies(&[Scope::Admin], Scope::PlatformAdmin));
        assert!(!satisfies(&[Scope::PlatformAdmin], Scope::RegistryRead));
        assert!(!satisfies(&[Scope::RegistryRead], Scope::RegistryWrite));
    }

    #[test]
    fn granting_follows_spec_5_5() {
        assert!(may_grant(&[Scope::PlatformAdmin], Scope::PlatformAdmin));
        assert!(may_grant(&[Scope::Admin], Scope::PayloadWrite));
        assert!(!may_grant(&[Scope::Admin], Scope::PlatformAdmin));
        assert!(may_grant(&[Scope::RegistryRead], Scope::RegistryRead));
        assert!(!may_grant(&[Scope::RegistryRead], Scope::RegistryWrite));
    }

    #[test]
    fn read_only_keys_hold_no_write_scope() {
        for scope in KeyType::ReadOnly.scopes() {
            assert!(scope.as_str().ends_with(":read"));
        }
    }
}
