//! The control plane's background rounds, in one list ([`start`]). Each is a small
//! function that runs a service's round now and then until the app stops; the rounds
//! themselves live with the data they change (the ledger's days, approvals, billing...).
//!
//! Every round runs on every replica and is safe so (each takes the locks its writes
//! need, and a second runner finds nothing left to do), except the anomaly detector and
//! the notification worker, which run on the one replica holding their lease
//! (`crate::lease`). The proxies' stream leases are renewed by every replica for its own
//! streams.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::changes::chain::VerifiedLinks;
use crate::config::Config;
use crate::db::Db;
use crate::metrics::HttpMetrics;
use crate::notifications::worker::Worker;
use crate::periodic::every;
use crate::proxy_state::confirm::Confirmations;
use warden_shared::clock::Clock;

/// What the rounds work with.
#[derive(Clone)]
pub struct Context {
    pub db: Db,
    pub clock: Clock,
    /// This replica's id, the holder of leases.
    pub replica_id: String,
    pub stopping: watch::Receiver<bool>,
    /// How far each tenant's audit chain was verified (shared with the console).
    pub verified_links: Arc<VerifiedLinks>,
    pub metrics: Arc<HttpMetrics>,
}

/// Starts every background round `config` turns on (an interval of 0 turns a round off
/// on this replica).
pub fn start(
    config: &Config,
    context: &Context,
    confirmations: Arc<Confirmations>,
    notifications: Option<Worker>,
) {
    let secs = Duration::from_secs;
    tokio::spawn(confirmations.renew_leases(context.stopping.clone()));
    if let Some(worker) = notifications {
        let interval = Duration::from_millis(config.notifications.delivery_interval_ms);
        tokio::spawn(worker.run(interval, context.stopping.clone()));
    }
    if config.close_days_interval_secs > 0 {
        tokio::spawn(close_days(
            context.clone(),
            secs(config.close_days_interval_secs),
        ));
    }
    if config.violation_summary_interval_secs > 0 {
        let period = secs(config.violation_summary_interval_secs);
        tokio::spawn(summarize_violations(context.clone(), period));
    }
    if config.approval_expiry_interval_secs > 0 {
        let period = secs(config.approval_expiry_interval_secs);
        tokio::spawn(expire_approvals(context.clone(), period));
    }
    tokio::spawn(forget_decision_batches(context.clone()));
    tokio::spawn(forget_grants(context.clone()));
    if config.billing.plan_change_interval_secs > 0 {
        let period = secs(config.billing.plan_change_interval_secs);
        tokio::spawn(apply_plan_changes(context.clone(), period));
    }
    if config.payload_purge_interval_secs > 0 {
        let period = secs(config.payload_purge_interval_secs);
        tokio::spawn(purge_payloads(context.clone(), period));
    }
    if config.audit_verification_interval_secs > 0 {
        let period = secs(config.audit_verification_interval_secs);
        tokio::spawn(verify_chains(context.clone(), period));
    }
    if config.anomaly_detection_interval_secs > 0 {
        let period = secs(config.anomaly_detection_interval_secs);
        tokio::spawn(detect_anomalies(context.clone(), period));
    }
}

/// How often the round walks every event of a chain; between, it verifies what was
/// appended since its last round.
const WHOLE_WALK_EVERY_MS: i64 = 24 * 3_600 * 1_000;

/// Verifies every tenant's audit chain and counts the broken ones for the alert on
/// `warden_audit_chain_broken_tenants`. Read-only: safe on every replica.
async fn verify_chains(c: Context, period: Duration) {
    every(
        "verify_audit_chains",
        period,
        period,
        c.stopping,
        || async {
            let tenants = match crate::changes::chain::chained_tenants(c.db.pool()).await {
                Ok(tenants) => tenants,
                Err(error) => {
                    tracing::warn!(%error, "cannot list the audit chains to verify");
                    return;
                }
            };
            let mut broken = 0;
            for tenant_id in &tenants {
                let now = c.clock.now().as_millis();
                let checked = crate::changes::chain::check(
                    c.db.pool(),
                    &c.verified_links,
                    tenant_id,
                    now,
                    WHOLE_WALK_EVERY_MS,
                    false,
                )
                .await;
                match checked {
                    Ok((verification, _)) if !verification.valid => {
                        broken += 1;
                        tracing::error!(
                            tenant_id,
                            broken = ?verification.broken,
                            "the audit trail's hash chain is broken"
                        );
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::warn!(%error, tenant_id, "cannot verify an audit chain");
                        return;
                    }
                }
            }
            c.metrics.gauges.set_chains_broken(broken);
        },
    )
    .await;
}

/// Rolls finished hours into the daily rollups and closes finished days
/// (`ledger::close_days`), first at once.
async fn close_days(c: Context, period: Duration) {
    every("close_days", Duration::ZERO, period, c.stopping, || async {
        match crate::ledger::close_days(&c.db, c.clock.now()).await {
            Ok(0) => {}
            Ok(days) => tracing::info!(days, "closed days of the daily cost rollup"),
            Err(error) => tracing::warn!(%error, "cannot close days of the daily cost rollup"),
        }
    })
    .await;
}

/// Audits each past minute's repeated policy violations as one counted event.
async fn summarize_violations(c: Context, period: Duration) {
    every(
        "summarize_violations",
        period,
        period,
        c.stopping,
        || async {
            let now = c.clock.now().as_millis();
            if let Err(error) = crate::api::policies::summarize_violations(&c.db, now, None).await {
                tracing::warn!(%error, "cannot audit the repeated policy violations");
            }
        },
    )
    .await;
}

/// Expires approvals nobody decided within their time.
async fn expire_approvals(c: Context, period: Duration) {
    every("expire_approvals", period, period, c.stopping, || async {
        if let Err(error) = crate::api::approvals::expire_lapsed(&c.db, c.clock.now()).await {
            tracing::warn!(%error, "cannot expire lapsed approvals");
        }
    })
    .await;
}

/// Forgets the ids of decision batches older than a week, hourly (the first round an
/// hour after start: nothing can be a week old before).
async fn forget_decision_batches(c: Context) {
    let hour = Duration::from_secs(3_600);
    every(
        "forget_decision_batches",
        hour,
        hour,
        c.stopping,
        || async {
            let before = c.clock.now().as_millis() - crate::api::internal::BATCH_ID_RETENTION_MS;
            if let Err(error) = crate::api::internal::forget_batches_before(&c.db, before).await {
                tracing::warn!(%error, "cannot forget old decision batch ids");
            }
        },
    )
    .await;
}

/// Forgets, every minute, rate limits' grants of minutes more than two minutes past and
/// budgets' holdings that lapsed.
async fn forget_grants(c: Context) {
    let minute = Duration::from_secs(60);
    every("forget_grants", minute, minute, c.stopping, || async {
        let now_ms = c.clock.now().as_millis();
        let before = now_ms.div_euclid(60_000) - 2;
        if let Err(error) = crate::api::internal::forget_rate_grants(&c.db, before).await {
            tracing::warn!(%error, "cannot forget old rate limit grants");
        }
        let lapsed = now_ms - crate::api::internal::BUDGET_GRANT_LAPSE_MS;
        if let Err(error) = crate::api::internal::forget_budget_grants(&c.db, lapsed).await {
            tracing::warn!(%error, "cannot forget lapsed budget grants");
        }
    })
    .await;
}

/// Applies the plan changes due at the end of billing periods.
async fn apply_plan_changes(c: Context, period: Duration) {
    every("apply_plan_changes", period, period, c.stopping, || async {
        if let Err(error) = crate::api::billing::apply_due_plan_changes(&c.db, c.clock.now()).await
        {
            tracing::warn!(%error, "cannot apply scheduled plan changes");
        }
    })
    .await;
}

/// Deletes captured payloads past their tenant's retention.
async fn purge_payloads(c: Context, period: Duration) {
    every("purge_payloads", period, period, c.stopping, || async {
        match crate::api::payload_capture::purge_expired(&c.db, c.clock.now()).await {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(deleted, "captured payloads past retention deleted"),
            Err(error) => tracing::warn!(%error, "cannot delete captured payloads past retention"),
        }
    })
    .await;
}

/// A detection pass over every tenant, on the replica holding the detector's lease.
async fn detect_anomalies(c: Context, period: Duration) {
    let ttl = period * 3;
    let job = crate::anomalies::LEASE_JOB;
    crate::lease::every_while_held(
        &c.db,
        job,
        &c.replica_id,
        period,
        ttl,
        c.stopping,
        || async {
            let started = std::time::Instant::now();
            match crate::anomalies::detect_all(&c.db, c.clock.now()).await {
                Ok(report) => tracing::info!(
                    agents = report.agents,
                    opened = report.opened,
                    updated = report.updated,
                    duration_ms = started.elapsed().as_millis() as u64,
                    "anomaly detection pass"
                ),
                Err(error) => tracing::warn!(%error, "anomaly detection pass failed"),
            }
        },
    )
    .await;
}
