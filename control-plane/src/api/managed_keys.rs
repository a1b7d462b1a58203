//! Managed provider keys (spec 2.17, 4.11): a tenant's own provider credentials, kept in
//! AWS Secrets Manager. Warden stores only the reference, which must lie under
//! `warden/managed/<tenant_id>/` (see `warden_shared::managed`), and never returns it;
//! the proxy resolves it when a key with `use_managed_key` calls that provider.
//! One managed key per provider and tenant (409 for a second).

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::Row;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::ids::{is_valid_id, new_id, IdKind};
use warden_shared::managed::{is_tenant_secret_ref, SECRET_PREFIX};
use warden_shared::registry::Provider;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope, PageQuery, Paged};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::api::validate::Text;
use crate::auth::{require, Authorized};
use crate::changes::{self, AuditEvent, ChangeKind, Proxies};
use crate::db::is_unique_violation;
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::plans::{self, Feature};
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_managed_keys, create_managed_key))
        .routes(routes!(delete_managed_key))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateManagedKeyInput {
    #[schema(value_type = String)]
    pub provider: Provider,
    pub label: Text<1, 100>,
    /// `warden/managed/<tenant_id>/<name>`, or the ARN of such a secret. Never returned.
    pub secret_ref: Text<1, 512>,
}

/// A managed key as the API shows it: never the reference, never the value.
#[derive(Debug, Serialize, ToSchema)]
pub struct ManagedKey {
    pub id: String,
    pub provider: String,
    pub label: String,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
}

#[utoipa::path(post, path = "/managed-keys", tag = "proxy", request_body = CreateManagedKeyInput,
    security(("bearer" = ["admin"])),
    responses((status = 201, description = "The managed key (without its reference)", body = Envelope<ManagedKey>),
        (status = 402, description = "The plan has no proxy (`plan_upgrade_required`)"),
        (status = 409, description = "The tenant has a managed key for that provider (`managed_key_exists`)")))]
async fn create_managed_key(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<CreateManagedKeyInput>,
) -> ApiResult<Response> {
    if !is_tenant_secret_ref(&caller.tenant_id, input.secret_ref.as_str()) {
        return Err(ApiError::validation(
            "secret_ref",
            format!(
                "secret_ref: must name a secret under {SECRET_PREFIX}{}/ (or be its ARN)",
                caller.tenant_id
            ),
        ));
    }
    let now = state.clock.now();
    let key = ManagedKey {
        id: new_id(IdKind::ManagedKey, now.as_millis()),
        provider: input.provider.as_str().to_owned(),
        label: input.label.into_inner(),
        created_at: now,
    };
    let mut tx = state.db.begin_write().await?;
    plans::require(&mut tx, &caller.tenant_id, Feature::Proxy, "managed keys").await?;
    let inserted = sqlx::query(
        "INSERT INTO managed_keys (id, tenant_id, provider, label, secret_ref, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&key.id)
    .bind(&caller.tenant_id)
    .bind(&key.provider)
    .bind(&key.label)
    .bind(input.secret_ref.as_str())
    .bind(now.as_millis())
    .execute(&mut *tx)
    .await;
    match inserted {
        Err(error) if is_unique_violation(&error) => {
            return Err(ApiError::new(
                ErrorCode::ManagedKeyExists,
                "the tenant already has a managed key for this provider; delete it first",
            ))
        }
        other => other?,
    };
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
    Ok(envelope::created(key))
}

#[utoipa::path(get, path = "/managed-keys", tag = "proxy", params(PageQuery),
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "One page of managed keys", body = Paged<ManagedKey>)))]
async fn list_managed_keys(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Response> {
    let page: crate::api::envelope::Page = query.try_into()?;
    let pool = state.db.pool();
    let keys = sqlx::query(
        "SELECT id, provider, label, created_at FROM managed_keys WHERE tenant_id = $1 \
         ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3",
    )
    .bind(&caller.tenant_id)
    .bind(page.limit)
    .bind(page.offset())
    .fetch_all(pool)
    .await?
    .iter()
    .map(|row| {
        Ok(ManagedKey {
            id: row.try_get("id")?,
            provider: row.try_get("provider")?,
            label: row.try_get("label")?,
            created_at: Timestamp::from_millis(row.try_get("created_at")?),
        })
    })
    .collect::<Result<Vec<_>, sqlx::Error>>()?;
    let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM managed_keys WHERE tenant_id = $1")
        .bind(&caller.tenant_id)
        .fetch_one(pool)
        .await?;
    Ok(envelope::paged(keys, page, total))
}

#[utoipa::path(delete, path = "/managed-keys/{managed_key_id}", tag = "proxy",
    params(("managed_key_id" = String, Path)), security(("bearer" = ["admin"])),
    responses((status = 204, description = "Deleted; proxies stop using it within a second")))]
async fn delete_managed_key(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiPath(managed_key_id): ApiPath<String>,
) -> ApiResult<Response> {
    if !is_valid_id(IdKind::ManagedKey, &managed_key_id) {
        return Err(ApiError::not_found("managed_key"));
    }
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let provider: Option<String> = sqlx::query_scalar(
        "DELETE FROM managed_keys WHERE tenant_id = $1 AND id = $2 RETURNING provider",
    )
    .bind(&caller.tenant_id)
    .bind(&managed_key_id)
    .fetch_optional(&mut *tx)
    .await?;
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
            target_id: &managed_key_id,
            details: json!({ "provider": provider }),
        },
        Proxies::Reload(ChangeKind::ManagedKey),
    )
    .await?;
    tx.commit().await?;
    Ok(envelope::no_content())
}
