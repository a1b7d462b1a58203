//! Gauges of the control plane's state that operators alert on (`deploy/prometheus/
//! alerts.yml`). Most are read from the database when `/metrics` is scraped, a few
//! indexed reads; the audit chain's is set by the round that verifies the chains
//! (`jobs`).
//!
//! - `warden_database_up`: 1 when the database answered this scrape's reads, else 0.
//! - `warden_state_version`: the newest version of what the proxies enforce; a proxy's
//!   `warden_proxy_snapshot_version` behind it for long is stuck.
//! - `warden_approvals_oldest_pending_seconds`: how long the oldest pending approval
//!   (of any tenant) has waited; 0 without one.
//! - `warden_budget_limits_at_threshold{threshold}`: budget limits that reached their
//!   `warn` or `block` threshold this month (each counted once per level).
//! - `warden_audit_chain_broken_tenants`: tenants whose chain the last round found broken.

use std::time::Duration;

use prometheus::{Gauge, IntGauge, IntGaugeVec, Opts, Registry};
use warden_shared::timestamp::Timestamp;

use crate::db::Db;

/// How long a scrape waits for the database before it reports it down.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

pub struct Gauges {
    database_up: IntGauge,
    state_version: IntGauge,
    oldest_pending: Gauge,
    budgets: IntGaugeVec,
    chain_broken: IntGauge,
}

impl Gauges {
    pub fn register(registry: &Registry) -> Result<Gauges, prometheus::Error> {
        let gauges = Gauges {
            database_up: IntGauge::new(
                "warden_database_up",
                "1 when the database answered this scrape's reads, else 0.",
            )?,
            state_version: IntGauge::new(
                "warden_state_version",
                "The newest version of the state the proxies enforce.",
            )?,
            oldest_pending: Gauge::new(
                "warden_approvals_oldest_pending_seconds",
                "How long the oldest pending approval has waited for a reviewer (0: none).",
            )?,
            budgets: IntGaugeVec::new(
                Opts::new(
                    "warden_budget_limits_at_threshold",
                    "Budget limits that reached their warn or block threshold this month.",
                ),
                &["threshold"],
            )?,
            chain_broken: IntGauge::new(
                "warden_audit_chain_broken_tenants",
                "Tenants whose audit hash chain the last verification round found broken.",
            )?,
        };
        registry.register(Box::new(gauges.database_up.clone()))?;
        registry.register(Box::new(gauges.state_version.clone()))?;
        registry.register(Box::new(gauges.oldest_pending.clone()))?;
        registry.register(Box::new(gauges.budgets.clone()))?;
        registry.register(Box::new(gauges.chain_broken.clone()))?;
        for level in ["warn", "block"] {
            gauges.budgets.with_label_values(&[level]).set(0);
        }
        Ok(gauges)
    }

    /// Reads the database's gauges as of `now`; when the database does not answer in
    /// time, `warden_database_up` turns 0 and the others keep their last values.
    pub async fn refresh(&self, db: &Db, now: Timestamp) {
        match tokio::time::timeout(READ_TIMEOUT, read(db, now)).await {
            Ok(Ok(read)) => {
                self.database_up.set(1);
                self.state_version.set(read.state_version);
                self.oldest_pending
                    .set(read.oldest_pending_ms as f64 / 1000.0);
                self.budgets.with_label_values(&["warn"]).set(read.warned);
                self.budgets.with_label_values(&["block"]).set(read.blocked);
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "metrics: the database does not answer");
                self.database_up.set(0);
            }
            Err(_) => {
                tracing::warn!("metrics: the database did not answer in time");
                self.database_up.set(0);
            }
        }
    }

    pub fn set_chains_broken(&self, tenants: usize) {
        self.chain_broken
            .set(i64::try_from(tenants).unwrap_or(i64::MAX));
    }
}

struct Read {
    state_version: i64,
    oldest_pending_ms: i64,
    warned: i64,
    blocked: i64,
}

async fn read(db: &Db, now: Timestamp) -> Result<Read, sqlx::Error> {
    let pool = db.pool();
    let now = now.as_millis();
    let state_version = crate::proxy_state::load::current_version(pool).await?;
    // The lapse index (status, expires_at) holds the pending ones apart.
    let oldest: Option<i64> = sqlx::query_scalar(
        "SELECT MIN(created_at) FROM approvals WHERE status = 'pending' AND expires_at > $1",
    )
    .bind(now)
    .fetch_one(pool)
    .await?;
    let month = Timestamp::from_millis(now).month_start();
    let levels: Vec<(String, i64)> =
        sqlx::query_as("SELECT level, COUNT(*) FROM budget_alerts WHERE month = $1 GROUP BY level")
            .bind(month)
            .fetch_all(pool)
            .await?;
    let count = |name: &str| {
        levels
            .iter()
            .find(|(level, _)| level == name)
            .map_or(0, |(_, count)| *count)
    };
    Ok(Read {
        state_version,
        oldest_pending_ms: oldest.map_or(0, |created| (now - created).max(0)),
        warned: count("warn"),
        blocked: count("block"),
    })
}
