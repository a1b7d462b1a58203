//! The rules of managed keys: the plan gate, the tenant's secret prefix, one key per
//! provider, and each write with its audit event and the proxies' change row.

use crate::api::provider_names;
use serde_json::json;
use warden_shared::ids::{is_valid_id, new_id, IdKind};
use warden_shared::managed::{resolve_secret_ref, SECRET_PREFIX};

use super::{store, CreateManagedKeyInput, ManagedKey};
use crate::api::envelope::Page;
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, ChangeKind, Proxies};
use crate::db::is_unique_violation;
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::plans::{self, Feature};
use crate::state::AppState;

/// The full Secrets Manager name `given` stands for, which must lie under the tenant's
/// managed prefix (given relative to it, in full, or as an ARN); 422 on `secret_ref`
/// otherwise, with `example` as a relative name. Managed keys and MCP servers' credentials.
pub fn tenant_secret_ref(tenant_id: &str, given: &str, example: &str) -> ApiResult<String> {
    resolve_secret_ref(tenant_id, given).ok_or_else(|| {
        ApiError::validation(
            "secret_ref",
            format!(
                "secret_ref: must name a secret under {SECRET_PREFIX}{tenant_id}/, as a name \
                 relative to it (`{example}`), the full name, or its ARN"
            ),
        )
    })
}

pub async fn create_managed_key(
    state: &AppState,
    caller: &Caller,
    input: CreateManagedKeyInput,
) -> ApiResult<ManagedKey> {
    let secret_ref =
        tenant_secret_ref(&caller.tenant_id, input.secret_ref.as_str(), "openai/prod")?;
    provider_names::require_known(&state.providers, "provider", [&input.provider])?;
    let now = state.clock.now();
    let key = ManagedKey {
        id: new_id(IdKind::ManagedKey, now.as_millis()),
        provider: input.provider.as_str().to_owned(),
        label: input.label.into_inner(),
        created_at: now,
    };
    let mut tx = state.db.begin_write().await?;
    plans::require(&mut tx, &caller.tenant_id, Feature::Proxy, "managed keys").await?;
    let inserted = store::insert(&mut tx, &caller.tenant_id, &key, &secret_ref).await;
    match inserted {
        Err(error) if is_unique_violation(&error) => {
            return Err(ApiError::new(
                ErrorCode::ManagedKeyExists,
                "the tenant already has a managed key for this provider; delete it first",
            ))
        }
        other => other?,
    }
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "managed_key.created",
            target_type: "managed_key",
            target_id: &key.id,
            details: json!({ "provider": key.provider, "label": key.label }),
        },
        Proxies::Reload(ChangeKind::ManagedKey),
    )
    .await?;
    tx.commit().await?;
    Ok(key)
}

pub async fn list_managed_keys(
    state: &AppState,
    caller: &Caller,
    page: Page,
) -> ApiResult<(Vec<ManagedKey>, i64)> {
    let keys = store::list(state.db.pool(), &caller.tenant_id, page).await?;
    let total = store::count(state.db.pool(), &caller.tenant_id).await?;
    Ok((keys, total))
}

pub async fn delete_managed_key(
    state: &AppState,
    caller: &Caller,
    managed_key_id: &str,
) -> ApiResult<()> {
    if !is_valid_id(IdKind::ManagedKey, managed_key_id) {
        return Err(ApiError::not_found("managed_key"));
    }
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let provider = store::delete(&mut tx, &caller.tenant_id, managed_key_id).await?;
    let Some(provider) = provider else {
        return Err(ApiError::not_found("managed_key"));
    };
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "managed_key.deleted",
            target_type: "managed_key",
            target_id: managed_key_id,
            details: json!({ "provider": provider }),
        },
        Proxies::Reload(ChangeKind::ManagedKey),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
