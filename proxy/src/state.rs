//! What the proxy enforces, in memory: the last snapshot from the control plane with every
//! delta since applied. The request path only reads it.
//!
//! A full snapshot is built into fresh maps and swapped in whole, so a request never sees
//! a half-replaced state; deltas update the current maps entry by entry (each entry is the
//! entity's complete current state, so order within a delta does not matter).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

use crate::maps::FastMap;
use warden_shared::registry::Provider;
use warden_shared::snapshot::{
    AgentState, BudgetLimitState, Delta, Entity, EntityRef, ManagedKeyState, McpServerState,
    ProxyKeyState, Snapshot, StreamMessage, TenantState,
};

use warden_shared::policy::{sort_for_evaluation, Policy};

use crate::budget::{Budgets, FigureSource};
use crate::capture::TenantCapture;

/// The enforcement state and when it last heard from the control plane.
#[derive(Default)]
pub struct EnforcementState {
    maps: RwLock<Arc<Maps>>,
    /// Budgets' counters, fed by the stream's spend figures (see `crate::budget`).
    pub budgets: Arc<Budgets>,
    version: AtomicI64,
    /// Unix ms of the last message from the control plane (0: never).
    synced_at_ms: AtomicI64,
}

#[derive(Default)]
struct Maps {
    keys_by_hash: FastMap<String, Arc<ProxyKeyState>>,
    key_hashes: FastMap<String, String>,
    agents: FastMap<String, Arc<AgentState>>,
    tenants: FastMap<String, Arc<TenantState>>,
    managed_keys: FastMap<(String, Provider), Arc<ManagedKeyState>>,
    managed_key_slots: FastMap<String, (String, Provider)>,
    /// Each tenant's enabled policies in evaluation order, replaced whole on a change.
    policies: FastMap<String, Arc<Vec<Policy>>>,
    policy_tenants: FastMap<i64, String>,
    /// Approvals in force: (agent, policy, provider, model) → until (Unix ms).
    grants: FastMap<GrantKey, i64>,
    grant_keys: FastMap<i64, (String, GrantKey)>,
    /// Each tenant's enabled budget limits, replaced whole on a change.
    budget_limits: FastMap<String, Arc<Vec<BudgetLimitState>>>,
    budget_limit_tenants: FastMap<String, String>,
    /// Tenants that capture payloads, their rules compiled.
    payload_captures: FastMap<String, Arc<TenantCapture>>,
    /// Each tenant's enabled MCP servers by name, replaced whole on a change.
    mcp_servers: FastMap<String, Arc<Vec<McpServerState>>>,
    mcp_server_tenants: FastMap<String, String>,
}

type GrantKey = (String, i64, Provider, String);

/// Everything the proxy knows about one presented key.
#[derive(Debug, Clone)]
pub struct KeyView {
    pub key: Arc<ProxyKeyState>,
    /// `None`: the agent was deleted (or is not known yet).
    pub agent: Option<Arc<AgentState>>,
    /// `None`: the tenant was deleted.
    pub tenant: Option<Arc<TenantState>>,
}

impl EnforcementState {
    /// Applies one stream message; `now_ms` records when the control plane was heard.
    pub fn apply(&self, message: StreamMessage, now_ms: i64) {
        match message {
            StreamMessage::Snapshot(snapshot) => self.replace(snapshot),
            StreamMessage::Delta(delta) => self.merge(delta),
            StreamMessage::Heartbeat { .. } => {}
            StreamMessage::Spend { scopes } => {
                self.budgets.apply_ledger(&scopes, FigureSource::Stream)
            }
        }
        self.synced_at_ms.store(now_ms, Ordering::Relaxed);
    }

    /// The version of the last change applied.
    pub fn version(&self) -> i64 {
        self.version.load(Ordering::Relaxed)
    }

    /// Unix ms of the last message from the control plane; 0 before the first.
    pub fn synced_at_ms(&self) -> i64 {
        self.synced_at_ms.load(Ordering::Relaxed)
    }

    /// Whether a snapshot was ever loaded.
    pub fn is_loaded(&self) -> bool {
        self.synced_at_ms() > 0
    }

    pub fn key_count(&self) -> usize {
        self.maps().keys_by_hash.len()
    }

    /// The key whose raw value hashes to `key_hash`, with its agent and tenant.
    pub fn lookup(&self, key_hash: &str) -> Option<KeyView> {
        let maps = self.maps();
        let key = maps.keys_by_hash.get(key_hash)?.value().clone();
        Some(KeyView {
            agent: maps.agents.get(&key.agent_id).map(|a| a.value().clone()),
            tenant: maps.tenants.get(&key.tenant_id).map(|t| t.value().clone()),
            key,
        })
    }

    /// The tenant's enabled policies in evaluation order; `None` when it has none.
    pub fn policies(&self, tenant_id: &str) -> Option<Arc<Vec<Policy>>> {
        self.maps()
            .policies
            .get(tenant_id)
            .map(|entry| entry.value().clone())
            .filter(|policies| !policies.is_empty())
    }

    /// The tenant's enabled budget limits; `None` when it has none.
    pub fn budget_limits(&self, tenant_id: &str) -> Option<Arc<Vec<BudgetLimitState>>> {
        self.maps()
            .budget_limits
            .get(tenant_id)
            .map(|entry| entry.value().clone())
            .filter(|limits| !limits.is_empty())
    }

    /// The tenant's payload capture, when it has it enabled.
    pub fn payload_capture(&self, tenant_id: &str) -> Option<Arc<TenantCapture>> {
        self.maps()
            .payload_captures
            .get(tenant_id)
            .map(|entry| entry.value().clone())
    }

    /// The tenant's enabled MCP servers, by name (for the MCP gateway).
    #[allow(
        dead_code,
        reason = "the MCP gateway reads it; until it lands, only tests do"
    )]
    pub fn mcp_servers(&self, tenant_id: &str) -> Option<Arc<Vec<McpServerState>>> {
        self.maps()
            .mcp_servers
            .get(tenant_id)
            .map(|entry| entry.value().clone())
            .filter(|servers| !servers.is_empty())
    }

    /// Whether a reviewer's approval lets the agent's request through now.
    pub fn approval_granted(
        &self,
        agent_id: &str,
        policy_id: i64,
        provider: Provider,
        model: &str,
        now_ms: i64,
    ) -> bool {
        let key = (agent_id.to_owned(), policy_id, provider, model.to_owned());
        self.maps()
            .grants
            .get(&key)
            .is_some_and(|until| *until > now_ms)
    }

    /// The tenant's managed key for `provider`.
    pub fn managed_key(&self, tenant_id: &str, provider: Provider) -> Option<Arc<ManagedKeyState>> {
        self.maps()
            .managed_keys
            .get(&(tenant_id.to_owned(), provider))
            .map(|entry| entry.value().clone())
    }

    fn maps(&self) -> Arc<Maps> {
        match self.maps.read() {
            Ok(maps) => maps.clone(),
            // A writer panicked mid-swap; the Arc inside is still whole.
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn replace(&self, snapshot: Snapshot) {
        self.budgets
            .apply_ledger(&snapshot.spend, FigureSource::Stream);
        let maps = Maps::default();
        for tenant in snapshot.tenants {
            maps.upsert(Entity::Tenant(tenant));
        }
        for agent in snapshot.agents {
            maps.upsert(Entity::Agent(agent));
        }
        for key in snapshot.keys {
            maps.upsert(Entity::Key(key));
        }
        for managed in snapshot.managed_keys {
            maps.upsert(Entity::ManagedKey(managed));
        }
        for policy in snapshot.policies {
            maps.upsert(Entity::Policy(policy));
        }
        for grant in snapshot.grants {
            maps.upsert(Entity::Grant(grant));
        }
        for limit in snapshot.budget_limits {
            maps.upsert(Entity::BudgetLimit(limit));
        }
        for capture in snapshot.payload_captures {
            maps.upsert(Entity::PayloadCapture(capture));
        }
        for server in snapshot.mcp_servers {
            maps.upsert(Entity::McpServer(server));
        }
        let fresh = Arc::new(maps);
        match self.maps.write() {
            Ok(mut current) => *current = fresh,
            Err(poisoned) => *poisoned.into_inner() = fresh,
        }
        self.version.store(snapshot.version, Ordering::Relaxed);
    }

    fn merge(&self, delta: Delta) {
        let maps = self.maps();
        for entity in delta.upserts {
            maps.upsert(entity);
        }
        for removed in delta.removals {
            maps.remove(removed);
        }
        self.version.fetch_max(delta.version, Ordering::Relaxed);
    }
}

impl Maps {
    fn upsert(&self, entity: Entity) {
        match entity {
            Entity::Tenant(tenant) => {
                self.tenants.insert(tenant.id.clone(), Arc::new(tenant));
            }
            Entity::Agent(agent) => {
                self.agents.insert(agent.id.clone(), Arc::new(agent));
            }
            Entity::Key(key) => {
                // A key's hash never changes, but drop any stale entry under an old one.
                if let Some(old) = self.key_hashes.insert(key.id.clone(), key.key_hash.clone()) {
                    if old != key.key_hash {
                        self.keys_by_hash.remove(&old);
                    }
                }
                self.keys_by_hash
                    .insert(key.key_hash.clone(), Arc::new(key));
            }
            Entity::ManagedKey(managed) => {
                let slot = (managed.tenant_id.clone(), managed.provider);
                if let Some(old) = self
                    .managed_key_slots
                    .insert(managed.id.clone(), slot.clone())
                {
                    if old != slot {
                        self.managed_keys.remove(&old);
                    }
                }
                self.managed_keys.insert(slot, Arc::new(managed));
            }
            Entity::Policy(state) => match Policy::from_state(&state) {
                Ok(policy) => {
                    self.policy_tenants
                        .insert(policy.id, state.tenant_id.clone());
                    self.replace_policy(&state.tenant_id, policy.id, Some(policy));
                }
                Err(error) => {
                    // Written by a newer control plane, say: not enforced, said loudly.
                    tracing::error!(policy_id = state.id, message = %error.message, "policy not understood; not enforced");
                    self.remove(EntityRef::Policy(state.id.to_string()));
                }
            },
            Entity::Grant(grant) => {
                let key = (grant.agent_id, grant.policy_id, grant.provider, grant.model);
                self.grant_keys
                    .insert(grant.id, (grant.tenant_id, key.clone()));
                self.grants.insert(key, grant.until);
            }
            Entity::BudgetLimit(limit) => {
                self.budget_limit_tenants
                    .insert(limit.id.clone(), limit.tenant_id.clone());
                let tenant_id = limit.tenant_id.clone();
                self.replace_budget_limit(&tenant_id, &limit.id.clone(), Some(limit));
            }
            Entity::McpServer(server) => {
                self.mcp_server_tenants
                    .insert(server.id.clone(), server.tenant_id.clone());
                let (tenant_id, id) = (server.tenant_id.clone(), server.id.clone());
                self.replace_mcp_server(&tenant_id, &id, Some(server));
            }
            Entity::PayloadCapture(state) => match TenantCapture::compile(&state) {
                Ok(capture) => {
                    self.payload_captures
                        .insert(state.tenant_id, Arc::new(capture));
                }
                Err(message) => {
                    // Capturing without the rules would keep what they remove.
                    tracing::error!(tenant_id = %state.tenant_id, %message, "redaction rules not understood; payloads not captured");
                    self.payload_captures.remove(&state.tenant_id);
                }
            },
        }
    }

    /// Puts `server` (or, with `None`, nothing) in place of server `id` in the tenant's
    /// list, kept in name order.
    fn replace_mcp_server(&self, tenant_id: &str, id: &str, server: Option<McpServerState>) {
        replace_in_list(
            &self.mcp_servers,
            tenant_id,
            |s| s.id != id,
            server,
            |servers| servers.sort_by(|a, b| a.name.cmp(&b.name)),
        );
    }

    /// Puts `limit` (or, with `None`, nothing) in place of limit `id` in the tenant's list.
    fn replace_budget_limit(&self, tenant_id: &str, id: &str, limit: Option<BudgetLimitState>) {
        replace_in_list(
            &self.budget_limits,
            tenant_id,
            |l| l.id != id,
            limit,
            |_| {},
        );
    }

    /// Puts `policy` (or, with `None`, nothing) in place of policy `id` in the tenant's
    /// list, kept in evaluation order.
    fn replace_policy(&self, tenant_id: &str, id: i64, policy: Option<Policy>) {
        replace_in_list(
            &self.policies,
            tenant_id,
            |p| p.id != id,
            policy,
            |policies| sort_for_evaluation(policies),
        );
    }

    fn remove(&self, removed: EntityRef) {
        match removed {
            EntityRef::Key(id) => {
                if let Some((_, hash)) = self.key_hashes.remove(&id) {
                    self.keys_by_hash.remove(&hash);
                }
            }
            EntityRef::Agent(id) => {
                self.agents.remove(&id);
            }
            EntityRef::Policy(id) => {
                let Ok(id) = id.parse::<i64>() else {
                    return;
                };
                if let Some((_, tenant_id)) = self.policy_tenants.remove(&id) {
                    self.replace_policy(&tenant_id, id, None);
                }
            }
            EntityRef::Grant(id) => {
                let Ok(id) = id.parse::<i64>() else {
                    return;
                };
                if let Some((_, (_, key))) = self.grant_keys.remove(&id) {
                    self.grants.remove(&key);
                }
            }
            EntityRef::BudgetLimit(id) => {
                if let Some((_, tenant_id)) = self.budget_limit_tenants.remove(&id) {
                    self.replace_budget_limit(&tenant_id, &id, None);
                }
            }
            EntityRef::PayloadCapture(tenant_id) => {
                self.payload_captures.remove(&tenant_id);
            }
            EntityRef::McpServer(id) => {
                if let Some((_, tenant_id)) = self.mcp_server_tenants.remove(&id) {
                    self.replace_mcp_server(&tenant_id, &id, None);
                }
            }
            EntityRef::ManagedKey(id) => {
                if let Some((_, slot)) = self.managed_key_slots.remove(&id) {
                    // Only if that slot still holds this key (a newer one may replace it).
                    self.managed_keys
                        .remove_if(&slot, |_, current| current.id == id);
                }
            }
            EntityRef::Tenant(id) => {
                self.tenants.remove(&id);
                self.keys_by_hash.retain(|_, key| key.tenant_id != id);
                self.key_hashes
                    .retain(|_, hash| self.keys_by_hash.contains_key(hash));
                self.agents.retain(|_, agent| agent.tenant_id != id);
                self.managed_keys.retain(|(tenant, _), _| *tenant != id);
                self.managed_key_slots
                    .retain(|_, (tenant, _)| *tenant != id);
                self.policies.remove(&id);
                self.policy_tenants.retain(|_, tenant| *tenant != id);
                self.budget_limits.remove(&id);
                self.budget_limit_tenants.retain(|_, tenant| *tenant != id);
                self.payload_captures.remove(&id);
                self.mcp_servers.remove(&id);
                self.mcp_server_tenants.retain(|_, tenant| *tenant != id);
                self.grant_keys.retain(|_, (tenant, key)| {
                    if *tenant == id {
                        self.grants.remove(key);
                    }
                    *tenant != id
                });
            }
        }
    }
}

/// Replaces a tenant's list whole (requests holding the old `Arc` keep a consistent
/// one): the items `keep` accepts plus `item`, put in order by `order`.
fn replace_in_list<T: Clone>(
    lists: &FastMap<String, Arc<Vec<T>>>,
    tenant_id: &str,
    keep: impl Fn(&T) -> bool,
    item: Option<T>,
    order: impl FnOnce(&mut Vec<T>),
) {
    let mut entry = lists.entry(tenant_id.to_owned()).or_default();
    let mut items: Vec<T> = entry.iter().filter(|i| keep(i)).cloned().collect();
    items.extend(item);
    order(&mut items);
    *entry = Arc::new(items);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str, tenant: &str, agent: &str) -> ProxyKeyState {
        ProxyKeyState {
            id: id.into(),
            key_hash: format!("hash-{id}"),
            tenant_id: tenant.into(),
            agent_id: agent.into(),
            team_id: None,
            allowed_providers: vec![],
            allowed_models: vec![],
            model_overrides: Default::default(),
            requests_per_minute: None,
            tokens_per_minute: None,
            budget_limit_micros: None,
            use_managed_key: false,
            expires_at: None,
        }
    }

    fn agent(id: &str, tenant: &str, blocked: bool) -> AgentState {
        AgentState {
            id: id.into(),
            tenant_id: tenant.into(),
            team_id: None,
            environment: "production".into(),
            blocked,
            quarantined: false,
            expires_at: None,
        }
    }

    fn tenant(id: &str) -> TenantState {
        TenantState {
            id: id.into(),
            plan: "starter".into(),
        }
    }

    #[test]
    fn deltas_update_and_remove_what_the_snapshot_loaded() {
        let state = EnforcementState::default();
        assert!(!state.is_loaded());
        state.apply(
            StreamMessage::Snapshot(Snapshot {
                version: 3,
                tenants: vec![tenant("t1"), tenant("t2")],
                agents: vec![agent("a1", "t1", false), agent("a2", "t2", false)],
                keys: vec![key("k1", "t1", "a1"), key("k2", "t2", "a2")],
                ..Snapshot::default()
            }),
            10,
        );
        assert!(state.is_loaded());
        assert_eq!(state.version(), 3);
        let view = state.lookup("hash-k1").map(|v| v.agent.map(|a| a.blocked));
        assert_eq!(view, Some(Some(false)));

        state.apply(
            StreamMessage::Delta(Delta {
                version: 5,
                upserts: vec![Entity::Agent(agent("a1", "t1", true))],
                removals: vec![EntityRef::Key("k2".into())],
            }),
            20,
        );
        assert_eq!(state.version(), 5);
        assert_eq!(state.synced_at_ms(), 20);
        let blocked = state
            .lookup("hash-k1")
            .and_then(|v| v.agent)
            .map(|a| a.blocked);
        assert_eq!(blocked, Some(true));
        assert!(state.lookup("hash-k2").is_none());

        // Removing a tenant removes everything of it.
        state.apply(
            StreamMessage::Delta(Delta {
                version: 6,
                upserts: vec![],
                removals: vec![EntityRef::Tenant("t1".into())],
            }),
            30,
        );
        assert!(state.lookup("hash-k1").is_none());
        assert_eq!(state.key_count(), 0);
    }

    #[test]
    fn a_snapshot_replaces_everything() {
        let state = EnforcementState::default();
        let snapshot = |keys: Vec<ProxyKeyState>| {
            StreamMessage::Snapshot(Snapshot {
                version: 1,
                tenants: vec![tenant("t1")],
                agents: vec![agent("a1", "t1", false)],
                keys,
                ..Snapshot::default()
            })
        };
        state.apply(snapshot(vec![key("k1", "t1", "a1")]), 1);
        state.apply(snapshot(vec![key("k9", "t1", "a1")]), 2);
        assert!(state.lookup("hash-k1").is_none());
        assert!(state.lookup("hash-k9").is_some());
    }

    #[test]
    fn managed_keys_are_found_by_tenant_and_provider() {
        let state = EnforcementState::default();
        let managed = ManagedKeyState {
            id: "mk1".into(),
            tenant_id: "t1".into(),
            provider: Provider::Openai,
            secret_ref: "warden/managed/t1/openai".into(),
        };
        state.apply(
            StreamMessage::Delta(Delta {
                version: 1,
                upserts: vec![Entity::ManagedKey(managed)],
                removals: vec![],
            }),
            1,
        );
        assert!(state.managed_key("t1", Provider::Openai).is_some());
        assert!(state.managed_key("t1", Provider::Anthropic).is_none());
        assert!(state.managed_key("t2", Provider::Openai).is_none());
        state.apply(
            StreamMessage::Delta(Delta {
                version: 2,
                upserts: vec![],
                removals: vec![EntityRef::ManagedKey("mk1".into())],
            }),
            2,
        );
        assert!(state.managed_key("t1", Provider::Openai).is_none());
    }

    #[test]
    fn policies_and_grants_follow_the_stream() {
        use warden_shared::policy::PolicyType;
        use warden_shared::snapshot::{ApprovalGrant, PolicyState};
        let policy = |id: i64, priority: i64| PolicyState {
            id,
            tenant_id: "t1".into(),
            name: format!("p{id}"),
            policy_type: PolicyType::BlockProvider,
            scope: "global".into(),
            priority,
            config: serde_json::json!({ "providers": ["nvidia"] }),
        };
        let grant = ApprovalGrant {
            id: 5,
            tenant_id: "t1".into(),
            agent_id: "a1".into(),
            policy_id: 1,
            provider: Provider::Openai,
            model: "gpt-4o".into(),
            until: 1_000,
        };
        let state = EnforcementState::default();
        state.apply(
            StreamMessage::Snapshot(Snapshot {
                version: 1,
                tenants: vec![tenant("t1")],
                policies: vec![policy(1, 0), policy(2, 9)],
                grants: vec![grant],
                ..Snapshot::default()
            }),
            1,
        );
        let order = |state: &EnforcementState| -> Vec<i64> {
            state
                .policies("t1")
                .map(|p| p.iter().map(|p| p.id).collect())
                .unwrap_or_default()
        };
        assert_eq!(order(&state), [2, 1]);
        assert!(state.approval_granted("a1", 1, Provider::Openai, "gpt-4o", 999));
        assert!(!state.approval_granted("a1", 1, Provider::Openai, "gpt-4o", 1_000));
        assert!(!state.approval_granted("a1", 1, Provider::Openai, "gpt-4o-mini", 999));
        state.apply(
            StreamMessage::Delta(Delta {
                version: 2,
                upserts: vec![Entity::Policy(policy(1, 20))],
                removals: vec![EntityRef::Policy("2".into()), EntityRef::Grant("5".into())],
            }),
            2,
        );
        assert_eq!(order(&state), [1]);
        assert!(!state.approval_granted("a1", 1, Provider::Openai, "gpt-4o", 999));
        let mut broken = policy(3, 0);
        broken.config = serde_json::json!({ "providers": [] });
        state.apply(
            StreamMessage::Delta(Delta {
                version: 3,
                upserts: vec![Entity::Policy(broken)],
                removals: vec![EntityRef::Tenant("t1".into())],
            }),
            3,
        );
        assert!(state.policies("t1").is_none());
    }

    #[test]
    fn mcp_servers_follow_their_changes_and_their_tenant() {
        let state = EnforcementState::default();
        let server = |id: &str, name: &str| McpServerState {
            id: id.into(),
            tenant_id: "t1".into(),
            name: name.into(),
            url: format!("https://{name}.example.com/mcp"),
            secret_ref: None,
        };
        state.apply(
            StreamMessage::Snapshot(Snapshot {
                version: 1,
                mcp_servers: vec![server("m1", "search"), server("m2", "github")],
                ..Snapshot::default()
            }),
            0,
        );
        let names = |state: &EnforcementState| -> Vec<String> {
            state
                .mcp_servers("t1")
                .map(|servers| servers.iter().map(|s| s.name.clone()).collect())
                .unwrap_or_default()
        };
        assert_eq!(names(&state), ["github", "search"]);
        state.apply(
            StreamMessage::Delta(Delta {
                version: 2,
                upserts: vec![Entity::McpServer(server("m1", "docs"))],
                removals: vec![EntityRef::McpServer("m2".into())],
            }),
            0,
        );
        assert_eq!(names(&state), ["docs"]);
        assert!(state.mcp_servers("t2").is_none());
        state.apply(
            StreamMessage::Delta(Delta {
                version: 3,
                upserts: vec![],
                removals: vec![EntityRef::Tenant("t1".into())],
            }),
            0,
        );
        assert!(state.mcp_servers("t1").is_none());
    }
}
