//! The maps the enforcement state is kept in, and how each streamed entity goes in and
//! out of them: an upsert is the entity's whole current state, a removal names it, and a
//! tenant's removal takes everything of the tenant.

use std::sync::Arc;

use warden_shared::policy::{sort_for_evaluation, Policy, Releases};
use warden_shared::registry::Provider;
use warden_shared::snapshot::{
    AgentState, BudgetLimitState, Entity, EntityRef, ManagedKeyState, McpServerState,
    ProxyKeyState, TenantState,
};

use crate::capture::TenantCapture;
use crate::maps::FastMap;

#[derive(Default)]
pub(super) struct Maps {
    pub(super) keys_by_hash: FastMap<String, Arc<ProxyKeyState>>,
    pub(super) key_hashes: FastMap<String, String>,
    pub(super) agents: FastMap<String, Arc<AgentState>>,
    pub(super) tenants: FastMap<String, Arc<TenantState>>,
    pub(super) managed_keys: FastMap<(String, Provider), Arc<ManagedKeyState>>,
    pub(super) managed_key_slots: FastMap<String, (String, Provider)>,
    /// Each tenant's enabled policies in evaluation order, replaced whole on a change.
    pub(super) policies: FastMap<String, Arc<Vec<Policy>>>,
    pub(super) policy_tenants: FastMap<i64, String>,
    /// Approvals of a scope in force: (agent, policy, provider, model) → until (Unix ms)
    /// and the approval's id.
    pub(super) grants: FastMap<GrantKey, (i64, i64)>,
    /// Approvals bound to an action in force: (agent, policy, digest) → the grant.
    pub(super) action_grants: FastMap<ActionKey, ActionGrant>,
    /// Where each approval's grant is, by its id, with its tenant.
    pub(super) grant_keys: FastMap<i64, (String, GrantSlot)>,
    /// Each tenant's enabled budget limits, replaced whole on a change.
    pub(super) budget_limits: FastMap<String, Arc<Vec<BudgetLimitState>>>,
    pub(super) budget_limit_tenants: FastMap<String, String>,
    /// Tenants that capture payloads, their rules compiled.
    pub(super) payload_captures: FastMap<String, Arc<TenantCapture>>,
    /// Each tenant's enabled MCP servers by name, replaced whole on a change.
    pub(super) mcp_servers: FastMap<String, Arc<Vec<McpServerState>>>,
    pub(super) mcp_server_tenants: FastMap<String, String>,
}

pub(super) type GrantKey = (String, i64, Provider, String);
pub(super) type ActionKey = (String, i64, String);

/// An approval of one action, by its digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ActionGrant {
    pub(super) approval_id: i64,
    pub(super) until: i64,
    /// Used once, claimed through the control plane (`releases` `action`).
    pub(super) single_use: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum GrantSlot {
    Scope(GrantKey),
    Action(ActionKey),
}

impl Maps {
    fn remove_grant(&self, slot: &GrantSlot) {
        match slot {
            GrantSlot::Scope(key) => {
                self.grants.remove(key);
            }
            GrantSlot::Action(key) => {
                self.action_grants.remove(key);
            }
        }
    }

    pub(super) fn upsert(&self, entity: Entity) {
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
                let slot = match (grant.releases.is_bound_to_action(), grant.action_digest) {
                    (true, Some(digest)) => {
                        let key = (grant.agent_id, grant.policy_id, digest);
                        self.action_grants.insert(
                            key.clone(),
                            ActionGrant {
                                approval_id: grant.id,
                                until: grant.until,
                                single_use: grant.releases == Releases::Action,
                            },
                        );
                        GrantSlot::Action(key)
                    }
                    // Bound to an action it does not name: it releases nothing.
                    (true, None) => return,
                    (false, _) => {
                        let key = (grant.agent_id, grant.policy_id, grant.provider, grant.model);
                        self.grants.insert(key.clone(), (grant.until, grant.id));
                        GrantSlot::Scope(key)
                    }
                };
                self.grant_keys.insert(grant.id, (grant.tenant_id, slot));
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

    pub(super) fn remove(&self, removed: EntityRef) {
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
                if let Some((_, (_, slot))) = self.grant_keys.remove(&id) {
                    self.remove_grant(&slot);
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
                self.grant_keys.retain(|_, (tenant, slot)| {
                    if *tenant == id {
                        self.remove_grant(slot);
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
