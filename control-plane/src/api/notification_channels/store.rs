//! SQL of notification channels and their deliveries. Every statement filters by tenant.

use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::{AnyPool, Row};
use warden_shared::timestamp::Timestamp;

use super::Delivery;
use crate::api::envelope::Page;
use crate::db::{json_column, WriteTx};
use crate::notifications::channel::ChannelType;

/// A channel row as stored: config unmasked.
#[derive(Debug, Clone)]
pub struct ChannelRow {
    pub id: String,
    pub name: String,
    pub channel_type: ChannelType,
    pub config: Value,
    pub signing_secret: Option<String>,
    pub enabled: bool,
    pub events: Vec<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

pub async fn insert(
    tx: &mut WriteTx,
    tenant_id: &str,
    row: &ChannelRow,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO notification_channels (id, tenant_id, name, channel_type, config, \
         signing_secret, enabled, events, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(&row.id)
    .bind(tenant_id)
    .bind(&row.name)
    .bind(row.channel_type.as_str())
    .bind(row.config.to_string())
    .bind(&row.signing_secret)
    .bind(i64::from(row.enabled))
    .bind(Value::from(row.events.clone()).to_string())
    .bind(row.created_at.as_millis())
    .bind(row.updated_at.as_millis())
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

pub async fn update(
    tx: &mut WriteTx,
    tenant_id: &str,
    row: &ChannelRow,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE notification_channels SET name = $1, config = $2, enabled = $3, events = $4, \
         updated_at = $5 WHERE tenant_id = $6 AND id = $7",
    )
    .bind(&row.name)
    .bind(row.config.to_string())
    .bind(i64::from(row.enabled))
    .bind(Value::from(row.events.clone()).to_string())
    .bind(row.updated_at.as_millis())
    .bind(tenant_id)
    .bind(&row.id)
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

const SELECT: &str = "SELECT id, name, channel_type, config, signing_secret, enabled, events, \
                      created_at, updated_at FROM notification_channels ";

pub async fn get(
    executor: impl sqlx::Executor<'_, Database = sqlx::Any>,
    tenant_id: &str,
    id: &str,
) -> Result<Option<ChannelRow>, sqlx::Error> {
    sqlx::query(&format!("{SELECT} WHERE tenant_id = $1 AND id = $2"))
        .bind(tenant_id)
        .bind(id)
        .fetch_optional(executor)
        .await?
        .as_ref()
        .map(channel_from_row)
        .transpose()
}

pub async fn list(
    pool: &AnyPool,
    tenant_id: &str,
    page: Page,
) -> Result<Vec<ChannelRow>, sqlx::Error> {
    sqlx::query(&format!(
        "{SELECT} WHERE tenant_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3"
    ))
    .bind(tenant_id)
    .bind(page.limit)
    .bind(page.offset())
    .fetch_all(pool)
    .await?
    .iter()
    .map(channel_from_row)
    .collect()
}

pub async fn count(
    executor: impl sqlx::Executor<'_, Database = sqlx::Any>,
    tenant_id: &str,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT COUNT(*) FROM notification_channels WHERE tenant_id = $1")
        .bind(tenant_id)
        .fetch_one(executor)
        .await
}

/// Deletes the channel with its deliveries and their attempts; false when there was none.
pub async fn delete(tx: &mut WriteTx, tenant_id: &str, id: &str) -> Result<bool, sqlx::Error> {
    sqlx::query(
        "DELETE FROM notification_attempts WHERE tenant_id = $1 AND delivery_id IN \
         (SELECT id FROM notification_deliveries WHERE tenant_id = $1 AND channel_id = $2)",
    )
    .bind(tenant_id)
    .bind(id)
    .execute(&mut **tx)
    .await?;
    sqlx::query("DELETE FROM notification_deliveries WHERE tenant_id = $1 AND channel_id = $2")
        .bind(tenant_id)
        .bind(id)
        .execute(&mut **tx)
        .await?;
    let deleted = sqlx::query("DELETE FROM notification_channels WHERE tenant_id = $1 AND id = $2")
        .bind(tenant_id)
        .bind(id)
        .execute(&mut **tx)
        .await?
        .rows_affected();
    Ok(deleted > 0)
}

pub async fn deliveries(
    pool: &AnyPool,
    tenant_id: &str,
    channel_id: &str,
    page: Page,
) -> Result<(Vec<Delivery>, i64), sqlx::Error> {
    let rows = sqlx::query(
        "SELECT id, event_type, status, attempts, last_error, created_at, next_attempt_at, \
         finished_at FROM notification_deliveries WHERE tenant_id = $1 AND channel_id = $2 \
         ORDER BY created_at DESC, id DESC LIMIT $3 OFFSET $4",
    )
    .bind(tenant_id)
    .bind(channel_id)
    .bind(page.limit)
    .bind(page.offset())
    .fetch_all(pool)
    .await?;
    let total = sqlx::query_scalar(
        "SELECT COUNT(*) FROM notification_deliveries WHERE tenant_id = $1 AND channel_id = $2",
    )
    .bind(tenant_id)
    .bind(channel_id)
    .fetch_one(pool)
    .await?;
    let deliveries = rows
        .iter()
        .map(|row| {
            let status: String = row.try_get("status")?;
            let next: i64 = row.try_get("next_attempt_at")?;
            Ok(Delivery {
                id: row.try_get("id")?,
                event_type: row.try_get("event_type")?,
                attempts: row.try_get("attempts")?,
                last_error: row.try_get("last_error")?,
                created_at: Timestamp::from_millis(row.try_get("created_at")?),
                next_attempt_at: (status == "pending").then(|| Timestamp::from_millis(next)),
                finished_at: row
                    .try_get::<Option<i64>, _>("finished_at")?
                    .map(Timestamp::from_millis),
                status,
            })
        })
        .collect::<Result<_, sqlx::Error>>()?;
    Ok((deliveries, total))
}

fn channel_from_row(row: &AnyRow) -> Result<ChannelRow, sqlx::Error> {
    let channel_type: String = row.try_get("channel_type")?;
    let config: String = row.try_get("config")?;
    let events: String = row.try_get("events")?;
    let enabled: i64 = row.try_get("enabled")?;
    Ok(ChannelRow {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        channel_type: channel_type
            .parse()
            .map_err(|()| sqlx::Error::ColumnDecode {
                index: "channel_type".to_owned(),
                source: format!("unknown channel type `{channel_type}`").into(),
            })?,
        config: json_column(&config),
        signing_secret: row.try_get("signing_secret")?,
        enabled: enabled != 0,
        events: serde_json::from_str(&events).unwrap_or_default(),
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
        updated_at: Timestamp::from_millis(row.try_get("updated_at")?),
    })
}
