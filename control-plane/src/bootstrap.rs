//! First start: make sure a platform-admin key exists.
//!
//! If none exists, the operators' own tenant is created with one key holding
//! `platform:admin`: the value of `WARDEN_BOOTSTRAP_PLATFORM_KEY` when set (automation
//! and tests rely on knowing it), otherwise a generated key that is returned here once
//! for printing and never stored in clear.

use warden_shared::keys;
use warden_shared::scopes::Scope;

use crate::config::Secret;
use crate::db::{Backend, Db};
use crate::plans::Plan;
use crate::tenancy::{self, NewTenant};
use warden_shared::clock::Clock;

/// What bootstrap found or did.
#[derive(Debug)]
pub enum BootstrapOutcome {
    /// A platform-admin key existed already; nothing was changed.
    AlreadyBootstrapped,
    /// The configured key became the platform-admin key.
    ConfiguredKeyInstalled,
    /// A key was generated; this is the only time it is available in clear.
    GeneratedKey(String),
}

const ACTOR: &str = "system:bootstrap";

pub async fn ensure_platform_admin(
    db: &Db,
    clock: &Clock,
    configured: Option<&Secret>,
) -> Result<BootstrapOutcome, String> {
    if let Some(key) = configured {
        if !keys::is_acceptable_supplied_key(key.expose()) {
            return Err(format!(
                "WARDEN_BOOTSTRAP_PLATFORM_KEY must start with `{}` followed by at least 24 \
                 letters, digits, `-` or `_`",
                keys::BRAND_PREFIX
            ));
        }
    }
    let mut tx = db.begin_write().await.map_err(|e| e.to_string())?;
    if db.backend() == Backend::Postgres {
        // Replicas starting together against an empty database must not both install a
        // key; the lock serialises them until this transaction ends. (SQLite's
        // `BEGIN IMMEDIATE` already does.)
        sqlx::query("SELECT CAST(pg_advisory_xact_lock(7041975001) AS TEXT)")
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| e.to_string())?;
    }
    let existing: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM api_keys k JOIN tenants t ON t.id = k.tenant_id \
         WHERE t.is_platform = 1",
    )
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| e.to_string())?;
    if existing > 0 {
        return Ok(BootstrapOutcome::AlreadyBootstrapped);
    }
    let now = clock.now();
    let platform_tenant: Option<String> =
        sqlx::query_scalar("SELECT id FROM tenants WHERE is_platform = 1")
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| e.to_string())?;
    let tenant_id = match platform_tenant {
        Some(id) => id,
        None => tenancy::insert_tenant(
            &mut tx,
            ACTOR,
            now,
            &NewTenant {
                company_name: "Warden platform operators",
                owner_email: None,
                plan: Plan::EnterprisePlus,
                agent_limit: Plan::EnterprisePlus.default_agent_limit(),
                is_platform: true,
            },
        )
        .await
        .map_err(|e| e.to_string())?,
    };
    let supplied = configured.map(|key| key.expose().to_owned());
    let was_supplied = supplied.is_some();
    let issued = tenancy::insert_api_key(
        &mut tx,
        &tenant_id,
        ACTOR,
        now,
        "bootstrap platform admin",
        &[Scope::PlatformAdmin],
        None,
        supplied,
    )
    .await
    .map_err(|e| e.to_string())?;
    tx.commit().await.map_err(|e| e.to_string())?;
    Ok(if was_supplied {
        BootstrapOutcome::ConfiguredKeyInstalled
    } else {
        BootstrapOutcome::GeneratedKey(issued.raw_key)
    })
}
