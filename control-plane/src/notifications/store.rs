//! SQL of the delivery worker: due deliveries, channels by id, attempts, queue figures.
//! The worker serves every tenant; each statement about a delivery's channel names the
//! delivery's tenant.

use sqlx::{AnyPool, Row};

use super::channel::{ChannelConfig, ChannelType};
use super::send::Channel;
use crate::db::Db;

/// A delivery waiting to be sent.
#[derive(Debug, Clone)]
pub struct Due {
    pub id: String,
    pub payload: String,
    pub attempts: i64,
    pub created_at: i64,
}

/// The channels with deliveries due at `now_ms`, the longest-waiting first.
pub async fn due_channels(
    pool: &AnyPool,
    now_ms: i64,
    limit: i64,
) -> Result<Vec<(String, String)>, sqlx::Error> {
    sqlx::query(
        "SELECT tenant_id, channel_id, MIN(next_attempt_at) AS first_due \
         FROM notification_deliveries WHERE status = 'pending' AND next_attempt_at <= $1 \
         GROUP BY tenant_id, channel_id ORDER BY first_due LIMIT $2",
    )
    .bind(now_ms)
    .bind(limit)
    .fetch_all(pool)
    .await?
    .iter()
    .map(|row| Ok((row.try_get("tenant_id")?, row.try_get("channel_id")?)))
    .collect()
}

/// One channel's pending deliveries due at `now_ms`, in the order their events happened.
pub async fn due_for_channel(
    pool: &AnyPool,
    tenant_id: &str,
    channel_id: &str,
    now_ms: i64,
    limit: i64,
) -> Result<Vec<Due>, sqlx::Error> {
    sqlx::query(
        "SELECT id, payload, attempts, created_at FROM notification_deliveries \
         WHERE tenant_id = $1 AND channel_id = $2 AND status = 'pending' \
         AND next_attempt_at <= $3 ORDER BY created_at, id LIMIT $4",
    )
    .bind(tenant_id)
    .bind(channel_id)
    .bind(now_ms)
    .bind(limit)
    .fetch_all(pool)
    .await?
    .iter()
    .map(|row| {
        Ok(Due {
            id: row.try_get("id")?,
            payload: row.try_get("payload")?,
            attempts: row.try_get("attempts")?,
            created_at: row.try_get("created_at")?,
        })
    })
    .collect()
}

/// A channel as the senders need it, with whether it is enabled; `None` when deleted or
/// when its stored settings no longer read (which the API never writes).
pub async fn channel(
    pool: &AnyPool,
    tenant_id: &str,
    channel_id: &str,
) -> Result<Option<(Channel, bool)>, sqlx::Error> {
    if let Some(rule_id) = channel_id.strip_prefix(super::outbox::ANOMALY_RULE_PREFIX) {
        return anomaly_rule_webhook(pool, tenant_id, channel_id, rule_id).await;
    }
    let Some(row) = sqlx::query(
        "SELECT channel_type, config, signing_secret, enabled FROM notification_channels \
         WHERE tenant_id = $1 AND id = $2",
    )
    .bind(tenant_id)
    .bind(channel_id)
    .fetch_optional(pool)
    .await?
    else {
        return Ok(None);
    };
    let channel_type: String = row.try_get("channel_type")?;
    let config: String = row.try_get("config")?;
    let parsed = channel_type
        .parse::<ChannelType>()
        .ok()
        .zip(serde_json::from_str(&config).ok())
        .and_then(|(kind, value)| ChannelConfig::parse(kind, &value).ok());
    let Some(config) = parsed else {
        return Ok(None);
    };
    let enabled: i64 = row.try_get("enabled")?;
    Ok(Some((
        Channel {
            id: channel_id.to_owned(),
            tenant_id: tenant_id.to_owned(),
            config,
            signing_secret: row.try_get("signing_secret")?,
        },
        enabled != 0,
    )))
}

/// An anomaly rule's webhook as a channel; `None` when the rule or its URL is gone.
async fn anomaly_rule_webhook(
    pool: &AnyPool,
    tenant_id: &str,
    channel_id: &str,
    rule_id: &str,
) -> Result<Option<(Channel, bool)>, sqlx::Error> {
    let Ok(rule_id) = rule_id.parse::<i64>() else {
        return Ok(None);
    };
    let Some(row) = sqlx::query(
        "SELECT notification_config, signing_secret, enabled FROM anomaly_rules \
         WHERE tenant_id = $1 AND id = $2",
    )
    .bind(tenant_id)
    .bind(rule_id)
    .fetch_optional(pool)
    .await?
    else {
        return Ok(None);
    };
    let config: String = row.try_get("notification_config")?;
    let url = serde_json::from_str::<serde_json::Value>(&config)
        .ok()
        .and_then(|config| {
            config
                .get("webhook_url")
                .and_then(|url| url.as_str().map(str::to_owned))
        });
    let Some(url) = url else {
        return Ok(None);
    };
    let enabled: i64 = row.try_get("enabled")?;
    Ok(Some((
        Channel {
            id: channel_id.to_owned(),
            tenant_id: tenant_id.to_owned(),
            config: ChannelConfig::Webhook(super::channel::WebhookConfig { url }),
            signing_secret: row.try_get("signing_secret")?,
        },
        enabled != 0,
    )))
}

/// One attempt's result and what becomes of the delivery.
pub struct Attempt<'a> {
    pub delivery_id: &'a str,
    pub tenant_id: &'a str,
    /// 1 for the first attempt.
    pub number: i64,
    pub at_ms: i64,
    pub duration_ms: i64,
    pub status_code: Option<u16>,
    pub error: Option<&'a str>,
    pub next: Next,
}

/// The delivery's state after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Delivered,
    RetryAt(i64),
    Dead,
}

/// Records an attempt and moves the delivery on, in one transaction; false when the
/// delivery was no longer pending (another replica's worker sent it meanwhile).
pub async fn record_attempt(db: &Db, attempt: &Attempt<'_>) -> Result<bool, sqlx::Error> {
    let (status, next_at, finished_at) = match attempt.next {
        Next::Delivered => ("delivered", attempt.at_ms, Some(attempt.at_ms)),
        Next::RetryAt(at) => ("pending", at, None),
        Next::Dead => ("dead", attempt.at_ms, Some(attempt.at_ms)),
    };
    let mut tx = db.begin_write().await?;
    let moved = sqlx::query(
        "UPDATE notification_deliveries SET status = $1, attempts = $2, next_attempt_at = $3, \
         last_error = $4, finished_at = $5 WHERE id = $6 AND status = 'pending'",
    )
    .bind(status)
    .bind(attempt.number)
    .bind(next_at)
    .bind(attempt.error)
    .bind(finished_at)
    .bind(attempt.delivery_id)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        > 0;
    if moved {
        sqlx::query(
            "INSERT INTO notification_attempts (delivery_id, attempt, tenant_id, attempted_at, \
             outcome, status_code, error, duration_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(attempt.delivery_id)
        .bind(attempt.number)
        .bind(attempt.tenant_id)
        .bind(attempt.at_ms)
        .bind(if attempt.error.is_none() {
            "delivered"
        } else {
            "failed"
        })
        .bind(attempt.status_code.map(i64::from))
        .bind(attempt.error)
        .bind(attempt.duration_ms)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(moved)
}

/// Ends a delivery that cannot be sent any more (its channel was deleted or disabled)
/// without an attempt.
pub async fn give_up(db: &Db, delivery_id: &str, at_ms: i64, why: &str) -> Result<(), sqlx::Error> {
    let mut tx = db.begin_write().await?;
    sqlx::query(
        "UPDATE notification_deliveries SET status = 'dead', last_error = $1, finished_at = $2 \
         WHERE id = $3 AND status = 'pending'",
    )
    .bind(why)
    .bind(at_ms)
    .bind(delivery_id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// How many deliveries are pending and when the oldest was queued.
pub async fn queue(pool: &AnyPool) -> Result<(i64, Option<i64>), sqlx::Error> {
    let row = sqlx::query(
        "SELECT COUNT(*) AS depth, MIN(created_at) AS oldest FROM notification_deliveries \
         WHERE status = 'pending'",
    )
    .fetch_one(pool)
    .await?;
    Ok((row.try_get("depth")?, row.try_get("oldest")?))
}
