//! The enforcement state follows the stream: snapshots replace, deltas update.

use warden_shared::snapshot::EntityRef;

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
        name: String::new(),
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
            spend: Vec::new(),
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
            spend: Vec::new(),
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
            spend: Vec::new(),
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
            spend: Vec::new(),
        }),
        2,
    );
    assert!(state.managed_key("t1", Provider::Openai).is_none());
}

fn digest() -> String {
    "d".repeat(64)
}

#[test]
fn approvals_bound_to_an_action_release_that_action_only() {
    use warden_shared::policy::Releases;
    use warden_shared::snapshot::ApprovalGrant;
    let grant = |id: i64, releases: Releases, digest: &str| ApprovalGrant {
        id,
        tenant_id: "t1".into(),
        agent_id: "a1".into(),
        policy_id: 1,
        provider: Provider::Mcp,
        model: "gh__delete_branch".into(),
        until: 1_000,
        releases,
        action_digest: Some(digest.into()),
    };
    let state = EnforcementState::default();
    state.apply(
        StreamMessage::Snapshot(Snapshot {
            version: 1,
            tenants: vec![tenant("t1")],
            grants: vec![
                grant(5, Releases::Action, &"a".repeat(64)),
                grant(6, Releases::ActionRepeatable, &"b".repeat(64)),
            ],
            ..Snapshot::default()
        }),
        1,
    );
    let granted = |digest: String, now: i64| {
        state.approval_granted("a1", 1, Provider::Mcp, "gh__delete_branch", || digest, now)
    };
    assert_eq!(granted("a".repeat(64), 999), Some(GrantUse::Claim(5)));
    assert_eq!(granted("b".repeat(64), 999), Some(GrantUse::Free(6)));
    // Another action of the same tool, or the time run out: nothing.
    assert_eq!(granted("c".repeat(64), 999), None);
    assert_eq!(granted("a".repeat(64), 1_000), None);
    // Used elsewhere: dropped here at once.
    state.drop_grant(5);
    assert_eq!(granted("a".repeat(64), 999), None);
    assert_eq!(granted("b".repeat(64), 999), Some(GrantUse::Free(6)));
}

#[test]
fn policies_and_grants_follow_the_stream() {
    use warden_shared::policy::{PolicyType, Releases};
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
        releases: Releases::Scope,
        action_digest: None,
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
    let granted = |state: &EnforcementState, model: &str, now: i64| {
        state.approval_granted("a1", 1, Provider::Openai, model, digest, now)
    };
    assert_eq!(granted(&state, "gpt-4o", 999), Some(GrantUse::Free(5)));
    assert_eq!(granted(&state, "gpt-4o", 1_000), None);
    assert_eq!(granted(&state, "gpt-4o-mini", 999), None);
    state.apply(
        StreamMessage::Delta(Delta {
            version: 2,
            upserts: vec![Entity::Policy(policy(1, 20))],
            removals: vec![EntityRef::Policy("2".into()), EntityRef::Grant("5".into())],
            spend: Vec::new(),
        }),
        2,
    );
    assert_eq!(order(&state), [1]);
    assert_eq!(granted(&state, "gpt-4o", 999), None);
    let mut broken = policy(3, 0);
    broken.config = serde_json::json!({ "providers": [] });
    state.apply(
        StreamMessage::Delta(Delta {
            version: 3,
            upserts: vec![Entity::Policy(broken)],
            removals: vec![EntityRef::Tenant("t1".into())],
            spend: Vec::new(),
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
        pinned_tools: Vec::new(),
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
            spend: Vec::new(),
        }),
        0,
    );
    assert_eq!(names(&state), ["docs"]);
    // What the gateway keeps sessions for: the removed server is not among them.
    assert_eq!(state.mcp_server_ids(), ["m1".to_owned()].into());
    assert!(state.mcp_servers("t2").is_none());
    state.apply(
        StreamMessage::Delta(Delta {
            version: 3,
            upserts: vec![],
            removals: vec![EntityRef::Tenant("t1".into())],
            spend: Vec::new(),
        }),
        0,
    );
    assert!(state.mcp_servers("t1").is_none());
    assert!(state.mcp_server_ids().is_empty());
}
