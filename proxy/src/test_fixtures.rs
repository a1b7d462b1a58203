//! What the unit tests of the reporters (usage records, decisions) and the rate windows
//! build alike: a proxy key and a one-policy list. (The results list they share is
//! `crate::decisions::results`, beside its type: this module stays below every other.)

use std::collections::BTreeMap;
use std::sync::Arc;

use warden_shared::policy::{Policy, PolicyConfig, Scope};
use warden_shared::registry::Provider;
use warden_shared::snapshot::ProxyKeyState;

/// Key `id` of agent `agent_id` in tenant `tenant_id`, with no limits of its own.
pub fn key(id: &str, tenant_id: &str, agent_id: &str) -> Arc<ProxyKeyState> {
    Arc::new(ProxyKeyState {
        id: id.into(),
        key_hash: "hash".into(),
        tenant_id: tenant_id.into(),
        agent_id: agent_id.into(),
        team_id: None,
        allowed_providers: vec![],
        allowed_models: vec![],
        model_overrides: BTreeMap::new(),
        requests_per_minute: None,
        tokens_per_minute: None,
        budget_limit_micros: None,
        use_managed_key: false,
        expires_at: None,
    })
}

/// One policy, 7, blocking NVIDIA, named with quotes that must be escaped.
pub fn no_nvidia() -> Arc<Vec<Policy>> {
    Arc::new(vec![Policy {
        id: 7,
        name: "no \"nvidia\"".into(),
        scope: Scope::Global,
        priority: 0,
        config: PolicyConfig::BlockProvider {
            providers: vec![Provider::Nvidia],
        },
    }])
}
