//! What the proxy enforces, in memory: the last snapshot from the control plane with every
//! delta since applied. The request path only reads it.
//!
//! A full snapshot is built into fresh maps and swapped in whole, so a request never sees
//! a half-replaced state; deltas update the current maps entry by entry (each entry is the
//! entity's complete current state, so order within a delta does not matter).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

use dashmap::DashMap;
use warden_shared::registry::Provider;
use warden_shared::snapshot::{
    AgentState, Delta, Entity, EntityRef, ManagedKeyState, ProxyKeyState, Snapshot, StreamMessage,
    TenantState,
};

use crate::budget::Budgets;

/// The enforcement state and when it last heard from the control plane.
#[derive(Default)]
pub struct EnforcementState {
    maps: RwLock<Arc<Maps>>,
    /// Keys' budgets, fed by the stream's spend figures (see `crate::budget`).
    pub budgets: Arc<Budgets>,
    version: AtomicI64,
    /// Unix ms of the last message from the control plane (0: never).
    synced_at_ms: AtomicI64,
}

#[derive(Default)]
struct Maps {
    keys_by_hash: DashMap<String, Arc<ProxyKeyState>>,
    key_hashes: DashMap<String, String>,
    agents: DashMap<String, Arc<AgentState>>,
    tenants: DashMap<String, Arc<TenantState>>,
    managed_keys: DashMap<(String, Provider), Arc<ManagedKeyState>>,
    managed_key_slots: DashMap<String, (String, Provider)>,
}

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
            StreamMessage::Spend { scopes } => self.budgets.apply_ledger(&scopes),
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
        self.budgets.apply_ledger(&snapshot.spend);
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
        }
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
            }
        }
    }
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
                managed_keys: vec![],
                spend: vec![],
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
                managed_keys: vec![],
                spend: vec![],
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
}
