//! Reads what the proxies enforce: the full snapshot, and the current state of the
//! entities named by outbox changes.

use std::collections::BTreeMap;

use sqlx::any::AnyRow;
use sqlx::{AnyPool, Row};
use warden_shared::policy::PolicyType;
use warden_shared::policy::Releases;
use warden_shared::registry::Provider;
use warden_shared::snapshot::{
    AgentState, ApprovalGrant, BudgetLimitState, Delta, Entity, EntityRef, ManagedKeyState,
    McpServerState, PayloadCaptureState, PinnedTool, PolicyState, ProxyKeyState,
    RedactionRuleState, Snapshot, TenantState,
};

use crate::changes::ChangeKind;
use crate::db::json_column;
use crate::proxy_state::spend;

/// The most changes one delta carries; a proxy further behind gets several deltas.
pub const MAX_CHANGES_PER_DELTA: i64 = 1000;

macro_rules! select_agents {
    () => {
        "SELECT a.id, a.tenant_id, a.name, a.team_id, a.environment, a.blocked, a.quarantined, a.expires_at FROM agents a"
    };
}

macro_rules! select_keys {
    () => {
        "SELECT p.api_key_id, k.key_hash, p.tenant_id, p.agent_id, p.team_id, \
         p.allowed_providers, p.allowed_models, p.model_overrides, p.rate_limit_override, \
         p.budget_limit_micros, p.use_managed_key, k.expires_at \
         FROM proxy_keys p JOIN api_keys k ON k.id = p.api_key_id AND k.tenant_id = p.tenant_id"
    };
}

macro_rules! select_policies {
    () => {
        "SELECT p.id, p.tenant_id, p.name, p.policy_type, p.config, p.scope, p.priority \
         FROM policies p WHERE p.enabled = 1"
    };
}

macro_rules! select_grants {
    () => {
        "SELECT g.id, g.tenant_id, g.agent_id, g.policy_id, g.provider, g.model, g.grant_until, \
         g.releases, g.action_digest FROM approvals g \
         WHERE g.status = 'approved' AND g.grant_until > $1 AND g.consumed_at IS NULL"
    };
}

macro_rules! select_budget_limits {
    () => {
        "SELECT b.id, b.tenant_id, b.scope, b.monthly_limit_micros, b.warn_threshold_pct, \
         b.block_threshold_pct FROM budget_limits b WHERE b.enabled = 1"
    };
}

macro_rules! select_payload_captures {
    () => {
        "SELECT c.tenant_id, c.config_version, c.redaction_rules \
         FROM payload_capture_configs c WHERE c.enabled = 1"
    };
}

macro_rules! select_mcp_servers {
    () => {
        "SELECT s.id, s.tenant_id, s.name, s.url, s.secret_ref FROM mcp_servers s \
         WHERE s.enabled = 1"
    };
}

macro_rules! select_managed_keys {
    () => {
        "SELECT m.id, m.tenant_id, m.provider, m.secret_ref FROM managed_keys m"
    };
}

/// The version of the newest committed change.
pub async fn current_version(pool: &AnyPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT version FROM proxy_state_version WHERE id = 1")
        .fetch_one(pool)
        .await
}

/// Everything the proxies enforce, with the spend of `month`. The version is read first:
/// entities read after it may already be newer, which the deltas that follow converge
/// over (they carry state, not differences).
pub async fn snapshot(pool: &AnyPool, month: i64, now_ms: i64) -> Result<Snapshot, sqlx::Error> {
    let version = current_version(pool).await?;
    let tenants = sqlx::query("SELECT id, plan FROM tenants")
        .fetch_all(pool)
        .await?
        .iter()
        .map(tenant_from_row)
        .collect::<Result<_, _>>()?;
    let agents = sqlx::query(concat!(
        select_agents!(),
        " WHERE a.deleted_at IS NULL AND EXISTS (SELECT 1 FROM proxy_keys p \
         WHERE p.tenant_id = a.tenant_id AND p.agent_id = a.id)"
    ))
    .fetch_all(pool)
    .await?
    .iter()
    .map(agent_from_row)
    .collect::<Result<_, _>>()?;
    let keys = sqlx::query(select_keys!())
        .fetch_all(pool)
        .await?
        .iter()
        .map(key_from_row)
        .collect::<Result<_, _>>()?;
    let managed_keys = sqlx::query(select_managed_keys!())
        .fetch_all(pool)
        .await?
        .iter()
        .map(managed_key_from_row)
        .collect::<Result<_, _>>()?;
    Ok(Snapshot {
        version,
        tenants,
        agents,
        keys,
        managed_keys,
        spend: spend::since(pool, month, i64::MIN).await?,
        policies: policies(pool).await?,
        grants: sqlx::query(select_grants!())
            .bind(now_ms)
            .fetch_all(pool)
            .await?
            .iter()
            .filter_map(|row| grant_from_row(row).transpose())
            .collect::<Result<_, _>>()?,
        budget_limits: sqlx::query(select_budget_limits!())
            .fetch_all(pool)
            .await?
            .iter()
            .map(budget_limit_from_row)
            .collect::<Result<_, _>>()?,
        payload_captures: sqlx::query(select_payload_captures!())
            .fetch_all(pool)
            .await?
            .iter()
            .filter_map(|row| payload_capture_from_row(row).transpose())
            .collect::<Result<_, _>>()?,
        mcp_servers: with_pins(
            pool,
            sqlx::query(select_mcp_servers!())
                .fetch_all(pool)
                .await?
                .iter()
                .map(mcp_server_from_row)
                .collect::<Result<_, _>>()?,
            None,
        )
        .await?,
    })
}

/// `servers` with their approved tools (all servers' pins, or `only` one server's).
async fn with_pins(
    pool: &AnyPool,
    mut servers: Vec<McpServerState>,
    only: Option<&str>,
) -> Result<Vec<McpServerState>, sqlx::Error> {
    let rows = match only {
        Some(id) => {
            sqlx::query(
                "SELECT server_id, name, fingerprint FROM mcp_server_tools WHERE server_id = $1 \
                 ORDER BY name",
            )
            .bind(id)
            .fetch_all(pool)
            .await?
        }
        None => sqlx::query(
            "SELECT server_id, name, fingerprint FROM mcp_server_tools ORDER BY server_id, name",
        )
        .fetch_all(pool)
        .await?,
    };
    let mut pins: BTreeMap<String, Vec<PinnedTool>> = BTreeMap::new();
    for row in &rows {
        pins.entry(row.try_get("server_id")?)
            .or_default()
            .push(PinnedTool {
                name: row.try_get("name")?,
                fingerprint: row.try_get("fingerprint")?,
            });
    }
    for server in &mut servers {
        server.pinned_tools = pins.remove(&server.id).unwrap_or_default();
    }
    Ok(servers)
}

/// Every tenant's enabled policies.
pub async fn policies(pool: &AnyPool) -> Result<Vec<PolicyState>, sqlx::Error> {
    sqlx::query(select_policies!())
        .fetch_all(pool)
        .await?
        .iter()
        .filter_map(|row| policy_from_row(row).transpose())
        .collect()
}

/// A tenant's enabled policies (for the dry run).
pub async fn tenant_policies(
    pool: &AnyPool,
    tenant_id: &str,
) -> Result<Vec<PolicyState>, sqlx::Error> {
    sqlx::query(concat!(select_policies!(), " AND p.tenant_id = $1"))
        .bind(tenant_id)
        .fetch_all(pool)
        .await?
        .iter()
        .filter_map(|row| policy_from_row(row).transpose())
        .collect()
}

fn policy_from_row(row: &AnyRow) -> Result<Option<PolicyState>, sqlx::Error> {
    let policy_type: String = row.try_get("policy_type")?;
    let Some(policy_type) = PolicyType::parse(&policy_type) else {
        tracing::warn!(
            policy_type,
            "a stored policy has an unknown type; not enforced"
        );
        return Ok(None);
    };
    Ok(Some(PolicyState {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        name: row.try_get("name")?,
        policy_type,
        scope: row.try_get("scope")?,
        priority: row.try_get("priority")?,
        config: json_column(&row.try_get::<String, _>("config")?),
    }))
}

fn grant_from_row(row: &AnyRow) -> Result<Option<ApprovalGrant>, sqlx::Error> {
    let provider: String = row.try_get("provider")?;
    let Some(provider) = Provider::parse(&provider) else {
        return Ok(None);
    };
    Ok(Some(ApprovalGrant {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        agent_id: row.try_get("agent_id")?,
        policy_id: row.try_get("policy_id")?,
        provider,
        model: row.try_get("model")?,
        until: row.try_get("grant_until")?,
        releases: Releases::parse(&row.try_get::<String, _>("releases")?).unwrap_or_default(),
        action_digest: row.try_get("action_digest")?,
    }))
}

/// The oldest version still in the outbox, if any.
pub async fn oldest_retained(pool: &AnyPool) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar("SELECT MIN(version) FROM proxy_changes")
        .fetch_one(pool)
        .await
}

/// The changes after `since` (at most [`MAX_CHANGES_PER_DELTA`]) as one delta of current
/// states; `None` when there are none.
pub async fn delta_since(
    pool: &AnyPool,
    since: i64,
    now_ms: i64,
) -> Result<Option<Delta>, sqlx::Error> {
    let changes = sqlx::query(
        "SELECT version, kind, entity_id FROM proxy_changes WHERE version > $1 \
         ORDER BY version LIMIT $2",
    )
    .bind(since)
    .bind(MAX_CHANGES_PER_DELTA)
    .fetch_all(pool)
    .await?;
    let Some(last) = changes.last() else {
        return Ok(None);
    };
    let mut delta = Delta {
        version: last.try_get("version")?,
        ..Delta::default()
    };
    // Each entity once, however often it changed in the range.
    let mut seen = std::collections::HashSet::new();
    for change in &changes {
        let kind: String = change.try_get("kind")?;
        let id: String = change.try_get("entity_id")?;
        if !seen.insert((kind.clone(), id.clone())) {
            continue;
        }
        match ChangeKind::parse(&kind) {
            Some(kind) => add_current_state(pool, &mut delta, kind, &id, now_ms).await?,
            None => tracing::warn!(kind, "unknown change kind in the outbox"),
        }
    }
    delta.spend = spend::of_budgets(pool, &delta.upserts, now_ms).await?;
    Ok(Some(delta))
}

async fn add_current_state(
    pool: &AnyPool,
    delta: &mut Delta,
    kind: ChangeKind,
    id: &str,
    now_ms: i64,
) -> Result<(), sqlx::Error> {
    match kind {
        ChangeKind::Tenant => match tenant(pool, id).await? {
            Some(tenant) => delta.upserts.push(Entity::Tenant(tenant)),
            None => delta.removals.push(EntityRef::Tenant(id.to_owned())),
        },
        ChangeKind::Agent => match agent(pool, id).await? {
            Some(agent) => delta.upserts.push(Entity::Agent(agent)),
            None => delta.removals.push(EntityRef::Agent(id.to_owned())),
        },
        ChangeKind::ApiKey => {
            let key = sqlx::query(concat!(select_keys!(), " WHERE p.api_key_id = $1"))
                .bind(id)
                .fetch_optional(pool)
                .await?;
            match key.as_ref().map(key_from_row).transpose()? {
                // The key's tenant and agent come along, so a proxy can use the key
                // whatever it held before.
                Some(key) => {
                    if let Some(tenant) = tenant(pool, &key.tenant_id).await? {
                        delta.upserts.push(Entity::Tenant(tenant));
                    }
                    if let Some(agent) = agent(pool, &key.agent_id).await? {
                        delta.upserts.push(Entity::Agent(agent));
                    }
                    delta.upserts.push(Entity::Key(key));
                }
                None => delta.removals.push(EntityRef::Key(id.to_owned())),
            }
        }
        ChangeKind::Policy => {
            let row = match id.parse::<i64>() {
                Ok(policy_id) => {
                    sqlx::query(concat!(select_policies!(), " AND p.id = $1"))
                        .bind(policy_id)
                        .fetch_optional(pool)
                        .await?
                }
                Err(_) => None,
            };
            match row.as_ref().map(policy_from_row).transpose()?.flatten() {
                Some(policy) => delta.upserts.push(Entity::Policy(policy)),
                None => delta.removals.push(EntityRef::Policy(id.to_owned())),
            }
        }
        ChangeKind::Approval => {
            // Granted while the change is read; a grant that lapses later is dropped by
            // the proxy's own clock.
            let row = match id.parse::<i64>() {
                Ok(approval_id) => {
                    sqlx::query(concat!(select_grants!(), " AND g.id = $2"))
                        .bind(now_ms)
                        .bind(approval_id)
                        .fetch_optional(pool)
                        .await?
                }
                Err(_) => None,
            };
            match row.as_ref().map(grant_from_row).transpose()?.flatten() {
                Some(grant) => delta.upserts.push(Entity::Grant(grant)),
                None => delta.removals.push(EntityRef::Grant(id.to_owned())),
            }
        }
        ChangeKind::BudgetLimit => {
            let row = sqlx::query(concat!(select_budget_limits!(), " AND b.id = $1"))
                .bind(id)
                .fetch_optional(pool)
                .await?;
            match row.as_ref().map(budget_limit_from_row).transpose()? {
                Some(limit) => delta.upserts.push(Entity::BudgetLimit(limit)),
                None => delta.removals.push(EntityRef::BudgetLimit(id.to_owned())),
            }
        }
        ChangeKind::PayloadCapture => {
            let row = sqlx::query(concat!(select_payload_captures!(), " AND c.tenant_id = $1"))
                .bind(id)
                .fetch_optional(pool)
                .await?;
            match row
                .as_ref()
                .map(payload_capture_from_row)
                .transpose()?
                .flatten()
            {
                Some(capture) => delta.upserts.push(Entity::PayloadCapture(capture)),
                None => delta
                    .removals
                    .push(EntityRef::PayloadCapture(id.to_owned())),
            }
        }
        ChangeKind::McpServer => {
            let row = sqlx::query(concat!(select_mcp_servers!(), " AND s.id = $1"))
                .bind(id)
                .fetch_optional(pool)
                .await?;
            match row.as_ref().map(mcp_server_from_row).transpose()? {
                Some(server) => {
                    let server = with_pins(pool, vec![server], Some(id)).await?;
                    delta
                        .upserts
                        .extend(server.into_iter().map(Entity::McpServer));
                }
                None => delta.removals.push(EntityRef::McpServer(id.to_owned())),
            }
        }
        ChangeKind::ManagedKey => {
            let row = sqlx::query(concat!(select_managed_keys!(), " WHERE m.id = $1"))
                .bind(id)
                .fetch_optional(pool)
                .await?;
            match row.as_ref().map(managed_key_from_row).transpose()? {
                Some(key) => delta.upserts.push(Entity::ManagedKey(key)),
                None => delta.removals.push(EntityRef::ManagedKey(id.to_owned())),
            }
        }
    }
    Ok(())
}

async fn tenant(pool: &AnyPool, id: &str) -> Result<Option<TenantState>, sqlx::Error> {
    sqlx::query("SELECT id, plan FROM tenants WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await?
        .as_ref()
        .map(tenant_from_row)
        .transpose()
}

/// A live agent; deleted agents read as absent.
async fn agent(pool: &AnyPool, id: &str) -> Result<Option<AgentState>, sqlx::Error> {
    sqlx::query(concat!(
        select_agents!(),
        " WHERE a.id = $1 AND a.deleted_at IS NULL"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await?
    .as_ref()
    .map(agent_from_row)
    .transpose()
}

fn tenant_from_row(row: &AnyRow) -> Result<TenantState, sqlx::Error> {
    Ok(TenantState {
        id: row.try_get("id")?,
        plan: row.try_get("plan")?,
    })
}

fn agent_from_row(row: &AnyRow) -> Result<AgentState, sqlx::Error> {
    Ok(AgentState {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        name: row.try_get("name")?,
        team_id: row.try_get("team_id")?,
        environment: row.try_get("environment")?,
        blocked: row.try_get::<i64, _>("blocked")? == 1,
        quarantined: row.try_get::<i64, _>("quarantined")? == 1,
        expires_at: row.try_get("expires_at")?,
    })
}

#[derive(serde::Deserialize, Default)]
struct StoredLimits {
    requests_per_minute: Option<i64>,
    tokens_per_minute: Option<i64>,
}

fn key_from_row(row: &AnyRow) -> Result<ProxyKeyState, sqlx::Error> {
    let limits: StoredLimits = row
        .try_get::<Option<String>, _>("rate_limit_override")?
        .map(|text| json_column(&text))
        .unwrap_or_default();
    let providers: Vec<String> = json_column(&row.try_get::<String, _>("allowed_providers")?);
    Ok(ProxyKeyState {
        id: row.try_get("api_key_id")?,
        key_hash: row.try_get("key_hash")?,
        tenant_id: row.try_get("tenant_id")?,
        agent_id: row.try_get("agent_id")?,
        team_id: row.try_get("team_id")?,
        allowed_providers: providers
            .iter()
            .filter_map(|p| Provider::parse(p))
            .collect(),
        allowed_models: json_column(&row.try_get::<String, _>("allowed_models")?),
        model_overrides: json_column::<BTreeMap<String, String>>(
            &row.try_get::<String, _>("model_overrides")?,
        ),
        requests_per_minute: limits.requests_per_minute,
        tokens_per_minute: limits.tokens_per_minute,
        budget_limit_micros: row.try_get("budget_limit_micros")?,
        use_managed_key: row.try_get::<i64, _>("use_managed_key")? == 1,
        expires_at: row.try_get("expires_at")?,
    })
}

fn budget_limit_from_row(row: &AnyRow) -> Result<BudgetLimitState, sqlx::Error> {
    Ok(BudgetLimitState {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        scope: row.try_get("scope")?,
        monthly_limit_micros: row.try_get("monthly_limit_micros")?,
        warn_threshold_pct: row.try_get("warn_threshold_pct")?,
        block_threshold_pct: row.try_get("block_threshold_pct")?,
    })
}

/// A tenant's enabled capture; `None` (captured nothing) when its stored rules do not
/// read: capturing without them would keep what they were to remove.
fn payload_capture_from_row(row: &AnyRow) -> Result<Option<PayloadCaptureState>, sqlx::Error> {
    let tenant_id: String = row.try_get("tenant_id")?;
    let rules = row.try_get::<String, _>("redaction_rules")?;
    let Ok(redaction_rules) = serde_json::from_str::<Vec<RedactionRuleState>>(&rules) else {
        tracing::error!(
            tenant_id,
            "stored redaction rules do not read; payloads not captured"
        );
        return Ok(None);
    };
    Ok(Some(PayloadCaptureState {
        tenant_id,
        config_version: row.try_get("config_version")?,
        redaction_rules,
    }))
}

fn mcp_server_from_row(row: &AnyRow) -> Result<McpServerState, sqlx::Error> {
    Ok(McpServerState {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        name: row.try_get("name")?,
        url: row.try_get("url")?,
        secret_ref: row.try_get("secret_ref")?,
        pinned_tools: Vec::new(),
    })
}

fn managed_key_from_row(row: &AnyRow) -> Result<ManagedKeyState, sqlx::Error> {
    let provider: String = row.try_get("provider")?;
    Ok(ManagedKeyState {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        provider: Provider::parse(&provider)
            .ok_or_else(|| sqlx::Error::Decode(format!("unknown provider {provider}").into()))?,
        secret_ref: row.try_get("secret_ref")?,
    })
}
