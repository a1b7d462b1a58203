//! What the proxy enforces, in memory: the last snapshot from the control plane with every
//! delta since applied. The request path only reads it.
//!
//! A full snapshot is built into fresh maps and swapped in whole, so a request never sees
//! a half-replaced state; deltas update the current maps entry by entry (each entry is the
//! entity's complete current state, so order within a delta does not matter).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

mod maps;
#[cfg(test)]
mod tests;

use warden_shared::policy::Policy;
use warden_shared::registry::Provider;
use warden_shared::snapshot::{
    AgentState, BudgetLimitState, Delta, Entity, EntityRef, ManagedKeyState, McpServerState,
    ProxyKeyState, Snapshot, StreamMessage, TenantState,
};

use crate::budget::{Budgets, FigureSource};
use crate::capture::TenantCapture;
use maps::Maps;

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

/// Everything the proxy knows about one presented key.
#[derive(Debug, Clone)]
pub struct KeyView {
    pub key: Arc<ProxyKeyState>,
    /// `None`: the agent was deleted (or is not known yet).
    pub agent: Option<Arc<AgentState>>,
    /// `None`: the tenant was deleted.
    pub tenant: Option<Arc<TenantState>>,
}

/// How an approval lets a request through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantUse {
    /// As often as it comes while the grant lasts; the approval's id.
    Free(i64),
    /// Once: the approval (by id) must be claimed through the control plane first.
    Claim(i64),
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

    /// The ids of every tenant's enabled MCP servers.
    pub fn mcp_server_ids(&self) -> std::collections::HashSet<String> {
        let mut ids = std::collections::HashSet::new();
        for servers in self.maps().mcp_servers.iter() {
            ids.extend(servers.value().iter().map(|server| server.id.clone()));
        }
        ids
    }

    /// The tenant's enabled MCP servers, by name (for the MCP gateway).
    pub fn mcp_servers(&self, tenant_id: &str) -> Option<Arc<Vec<McpServerState>>> {
        self.maps()
            .mcp_servers
            .get(tenant_id)
            .map(|entry| entry.value().clone())
            .filter(|servers| !servers.is_empty())
    }

    /// Whether a reviewer's approval lets the agent's request through now: one of the
    /// scope (provider and model, or tool), or one of the very action by its digest
    /// (`action_digest`, computed only when asked for).
    pub fn approval_granted(
        &self,
        agent_id: &str,
        policy_id: i64,
        provider: Provider,
        model: &str,
        action_digest: impl FnOnce() -> String,
        now_ms: i64,
    ) -> Option<GrantUse> {
        let maps = self.maps();
        let key = (agent_id.to_owned(), policy_id, provider, model.to_owned());
        if let Some(grant) = maps.grants.get(&key) {
            let (until, approval_id) = *grant;
            if until > now_ms {
                return Some(GrantUse::Free(approval_id));
            }
        }
        if maps.action_grants.is_empty() {
            return None;
        }
        let key = (agent_id.to_owned(), policy_id, action_digest());
        let grant = *maps.action_grants.get(&key)?;
        if grant.until <= now_ms {
            return None;
        }
        Some(if grant.single_use {
            GrantUse::Claim(grant.approval_id)
        } else {
            GrantUse::Free(grant.approval_id)
        })
    }

    /// Drops an approval's grant here (a single-use one that another proxy used: the
    /// stream's removal follows).
    pub fn drop_grant(&self, approval_id: i64) {
        self.maps()
            .remove(EntityRef::Grant(approval_id.to_string()));
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
        // The spend first: a limit it comes with holds against it from the moment the
        // limit is in the maps.
        self.budgets
            .apply_ledger(&delta.spend, FigureSource::Stream);
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
