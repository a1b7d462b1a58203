//! The rules of the capture configuration.

use std::collections::HashSet;

use serde_json::json;
use sqlx::Row;
use warden_shared::redaction::{self, MAX_PATTERN_CHARS};
use warden_shared::timestamp::Timestamp;

use super::store;
use super::{
    CaptureConfig, CaptureInput, RedactionRule, LEGAL_BASIS_NOTICE, MAXIMUM_RETENTION_DAYS,
};
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, ChangeKind, Proxies};
use crate::db::json_column;
use crate::error::{ApiError, ApiResult};
use crate::plans::{self, Plan};
use crate::state::AppState;

const MAX_RULES: usize = 25;

fn unconfigured() -> CaptureConfig {
    CaptureConfig {
        enabled: false,
        configured: false,
        retention_days: None,
        processing_purpose: None,
        redaction_rules: Vec::new(),
        config_version: 0,
        updated_by: None,
        created_at: None,
        updated_at: None,
        maximum_retention_days: MAXIMUM_RETENTION_DAYS,
        legal_basis_notice: LEGAL_BASIS_NOTICE,
    }
}

pub async fn get(state: &AppState, caller: &Caller) -> ApiResult<CaptureConfig> {
    read(&mut *state.db.pool().acquire().await?, &caller.tenant_id).await
}

async fn read(conn: &mut sqlx::AnyConnection, tenant_id: &str) -> ApiResult<CaptureConfig> {
    let Some(row) = store::read_config(conn, tenant_id).await? else {
        return Ok(unconfigured());
    };
    let rules: String = row.try_get("redaction_rules")?;
    Ok(CaptureConfig {
        enabled: row.try_get::<i64, _>("enabled")? != 0,
        configured: true,
        retention_days: Some(row.try_get("retention_days")?),
        processing_purpose: Some(row.try_get("processing_purpose")?),
        redaction_rules: json_column(&rules),
        config_version: row.try_get("config_version")?,
        updated_by: Some(row.try_get("updated_by")?),
        created_at: Some(Timestamp::from_millis(row.try_get("created_at")?)),
        updated_at: Some(Timestamp::from_millis(row.try_get("updated_at")?)),
        maximum_retention_days: MAXIMUM_RETENTION_DAYS,
        legal_basis_notice: LEGAL_BASIS_NOTICE,
    })
}

fn check_rules(rules: &[RedactionRule]) -> ApiResult<()> {
    if rules.len() > MAX_RULES {
        return Err(ApiError::validation(
            "redaction_rules",
            format!("redaction_rules: at most {MAX_RULES}"),
        ));
    }
    let mut ids = HashSet::new();
    for (index, rule) in rules.iter().enumerate() {
        if !ids.insert(rule.id.as_str()) {
            return Err(ApiError::validation(
                format!("redaction_rules[{index}].id"),
                format!(
                    "redaction_rules[{index}].id: `{}` is used twice",
                    rule.id.as_str()
                ),
            ));
        }
        let path_ok =
            rule.field_path.len() <= 500 && redaction::field_path_is_valid(&rule.field_path);
        if !path_ok {
            return Err(ApiError::validation(
                format!("redaction_rules[{index}].field_path"),
                format!(
                    "redaction_rules[{index}].field_path: dot-separated field names such as \
                     `messages.content`; array selectors such as `[*]` are not allowed"
                ),
            ));
        }
        if let Some(pattern) = &rule.pattern {
            let field = format!("redaction_rules[{index}].pattern");
            if pattern.is_empty() || pattern.chars().count() > MAX_PATTERN_CHARS {
                return Err(ApiError::validation(
                    field.clone(),
                    format!("{field}: 1 to {MAX_PATTERN_CHARS} characters"),
                ));
            }
            redaction::compile_pattern(pattern).map_err(|error| {
                ApiError::validation(
                    field.clone(),
                    format!("{field}: not a usable regular expression: {error}"),
                )
            })?;
        }
    }
    Ok(())
}

pub async fn put(
    state: &AppState,
    caller: &Caller,
    input: CaptureInput,
) -> ApiResult<CaptureConfig> {
    if !(1..=MAXIMUM_RETENTION_DAYS).contains(&input.retention_days) {
        return Err(ApiError::validation(
            "retention_days",
            format!("retention_days: 1 to {MAXIMUM_RETENTION_DAYS}"),
        ));
    }
    check_rules(&input.redaction_rules)?;
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let plan = plans::tenant_plan(&mut tx, &caller.tenant_id).await?;
    let allowed = Plan::of_tenant(&plan).telemetry_retention_days();
    if input.retention_days > allowed {
        return Err(ApiError::validation(
            "retention_days",
            format!("retention_days: the {plan} plan keeps telemetry {allowed} days at most"),
        ));
    }
    let rules = serde_json::to_string(&input.redaction_rules).unwrap_or_else(|_| "[]".to_owned());
    let version = store::upsert_config(
        &mut tx,
        &caller.tenant_id,
        &input,
        &rules,
        &caller.actor,
        now,
    )
    .await?;
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "payload_capture.configured",
            target_type: "tenant",
            target_id: &caller.tenant_id,
            details: json!({
                "enabled": input.enabled,
                "retention_days": input.retention_days,
                "processing_purpose": input.processing_purpose.as_str(),
                "redaction_rules": input.redaction_rules.len(),
                "config_version": version,
            }),
        },
        // The proxies capture (or stop capturing) from the answer on: read-your-writes.
        Proxies::Reload(ChangeKind::PayloadCapture),
    )
    .await?;
    let config = read(&mut tx, &caller.tenant_id).await?;
    tx.commit().await?;
    Ok(config)
}
