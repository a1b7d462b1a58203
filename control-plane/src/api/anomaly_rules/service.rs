//! The rules of anomaly rules: thresholds checked per type, the webhook URL through the
//! outbound guard with a secret of its own, one rule per type, audited writes.

use serde::Deserialize;
use serde_json::{json, Value};

use super::store::{self, RuleRow};
use super::{AnomalyRule, CreateRuleInput, UpdateRuleInput};
use crate::anomalies::thresholds;
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, Proxies};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::notifications::channel::{check_public_url, mask};
use crate::notifications::send::new_signing_secret;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NotificationConfig {
    #[serde(default)]
    webhook_url: Option<String>,
}

/// Checks `notification_config` and its URL with the guard; returns it as stored.
async fn checked_notification(state: &AppState, config: &Value) -> ApiResult<Value> {
    let parsed: NotificationConfig = serde_json::from_value(config.clone()).map_err(|error| {
        ApiError::validation(
            "notification_config",
            format!("notification_config: {error}"),
        )
    })?;
    let Some(url) = parsed.webhook_url else {
        return Ok(json!({}));
    };
    let field = "notification_config.webhook_url";
    check_public_url(&state.notification_sender.guard, field, &url).await?;
    Ok(json!({ "webhook_url": url }))
}

fn webhook_of(config: &Value) -> Option<&str> {
    config.get("webhook_url").and_then(Value::as_str)
}

pub async fn list(state: &AppState, caller: &Caller) -> ApiResult<Vec<AnomalyRule>> {
    let rules = store::list(state.db.pool(), &caller.tenant_id).await?;
    Ok(rules.iter().map(|rule| shown(rule, false)).collect())
}

pub async fn create(
    state: &AppState,
    caller: &Caller,
    input: CreateRuleInput,
) -> ApiResult<AnomalyRule> {
    let anomaly_type = input.anomaly_type.as_str();
    let threshold_config = input.threshold_config.unwrap_or_else(|| json!({}));
    thresholds::check(anomaly_type, &threshold_config)?;
    let notification_config = checked_notification(
        state,
        &input.notification_config.unwrap_or_else(|| json!({})),
    )
    .await?;
    let now = state.clock.now();
    let mut rule = RuleRow {
        id: 0,
        anomaly_type: anomaly_type.to_owned(),
        enabled: input.enabled.unwrap_or(true),
        signing_secret: webhook_of(&notification_config).map(|_| new_signing_secret()),
        threshold_config,
        notification_config,
        created_at: now,
        updated_at: now,
    };
    let mut tx = state.db.begin_write().await?;
    let Some(id) = store::insert(&mut tx, &caller.tenant_id, &rule).await? else {
        return Err(exists(anomaly_type));
    };
    rule.id = id;
    record(&mut tx, caller, &rule, "anomaly_rule.created").await?;
    tx.commit().await?;
    Ok(shown(&rule, true))
}

pub async fn update(
    state: &AppState,
    caller: &Caller,
    id: i64,
    input: UpdateRuleInput,
) -> ApiResult<AnomalyRule> {
    let current = store::get(state.db.pool(), &caller.tenant_id, id)
        .await?
        .ok_or_else(|| ApiError::not_found("anomaly_rule"))?;
    let mut next = current.clone();
    if let Some(kind) = input.anomaly_type {
        next.anomaly_type = kind.as_str().to_owned();
    }
    if let Some(enabled) = input.enabled {
        next.enabled = enabled;
    }
    if let Some(config) = input.threshold_config {
        next.threshold_config = config;
    }
    // The thresholds must suit the (possibly new) type.
    thresholds::check(&next.anomaly_type, &next.threshold_config)?;
    let mut new_secret = false;
    if let Some(mut config) = input.notification_config {
        // The masked URL sent back unchanged keeps the stored one.
        if let (Some(current_url), Some(sent)) = (
            webhook_of(&current.notification_config),
            webhook_of(&config),
        ) {
            if sent == mask(current_url) {
                config["webhook_url"] = json!(current_url);
            }
        }
        next.notification_config = checked_notification(state, &config).await?;
        match (
            webhook_of(&current.notification_config),
            webhook_of(&next.notification_config),
        ) {
            (_, None) => next.signing_secret = None,
            (None, Some(_)) => {
                next.signing_secret = Some(new_signing_secret());
                new_secret = true;
            }
            (Some(_), Some(_)) => {}
        }
    }
    next.updated_at = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    if store::get(&mut *tx, &caller.tenant_id, id).await?.is_none() {
        return Err(ApiError::not_found("anomaly_rule"));
    }
    if !store::update(&mut tx, &caller.tenant_id, &next).await? {
        return Err(exists(&next.anomaly_type));
    }
    record(&mut tx, caller, &next, "anomaly_rule.updated").await?;
    tx.commit().await?;
    Ok(shown(&next, new_secret))
}

pub async fn delete(state: &AppState, caller: &Caller, id: i64) -> ApiResult<()> {
    let mut tx = state.db.begin_write().await?;
    let Some(rule) = store::get(&mut *tx, &caller.tenant_id, id).await? else {
        return Err(ApiError::not_found("anomaly_rule"));
    };
    store::delete(&mut tx, &caller.tenant_id, id).await?;
    let mut gone = rule;
    gone.updated_at = state.clock.now();
    record(&mut tx, caller, &gone, "anomaly_rule.deleted").await?;
    tx.commit().await?;
    Ok(())
}

fn exists(anomaly_type: &str) -> ApiError {
    ApiError::new(
        ErrorCode::AnomalyRuleExists,
        format!("the tenant has a rule for {anomaly_type} already; change that one"),
    )
}

async fn record(
    tx: &mut crate::db::WriteTx,
    caller: &Caller,
    rule: &RuleRow,
    event_type: &str,
) -> Result<(), sqlx::Error> {
    let target_id = rule.id.to_string();
    changes::record(
        tx,
        caller.author(),
        rule.updated_at,
        AuditEvent {
            event_type,
            target_type: "anomaly_rule",
            target_id: &target_id,
            details: json!({
                "anomaly_type": rule.anomaly_type,
                "enabled": rule.enabled,
                "threshold_config": rule.threshold_config,
                "webhook": webhook_of(&rule.notification_config).is_some(),
            }),
        },
        Proxies::Unaffected,
    )
    .await?;
    Ok(())
}

fn shown(rule: &RuleRow, with_secret: bool) -> AnomalyRule {
    let notification_config = match webhook_of(&rule.notification_config) {
        Some(url) => json!({ "webhook_url": mask(url) }),
        None => json!({}),
    };
    AnomalyRule {
        id: rule.id,
        anomaly_type: rule.anomaly_type.clone(),
        enabled: rule.enabled,
        threshold_config: rule.threshold_config.clone(),
        notification_config,
        signing_secret: if with_secret {
            rule.signing_secret.clone()
        } else {
            None
        },
        created_at: rule.created_at,
        updated_at: rule.updated_at,
    }
}
