//! `/auth/me` and API keys: create (raw key once), list (never the key), delete.

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::any::AnyRow;
use sqlx::Row;
use utoipa::ToSchema;
use warden_shared::ids::{is_valid_id, IdKind};
use warden_shared::scopes::{self, KeyType, Scope};
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope, Page, PageQuery, Paged};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::api::validate::Text;
use crate::auth::{parse_scopes, require, Authorized};
use crate::changes::{self, AuditEvent, ChangeKind, Proxies};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::state::AppState;
use crate::tenancy;

#[derive(Debug, Serialize, ToSchema)]
pub struct Me {
    /// The API key id, or the session id for a login session token.
    pub key_id: String,
    pub tenant_id: String,
    #[schema(value_type = Vec<String>)]
    pub scopes: Vec<Scope>,
}

/// Who the presented credential is.
#[utoipa::path(get, path = "/auth/me", tag = "auth", security(("bearer" = [])),
    responses((status = 200, description = "The caller", body = Envelope<Me>)))]
pub async fn me(caller: Authorized<require::AnyScope>) -> Response {
    envelope::ok(Me {
        key_id: caller.credential_id.clone(),
        tenant_id: caller.tenant_id.clone(),
        scopes: caller.scopes.clone(),
    })
}

/// Keys expire after at most ten years; omitting `expires_in_days` means no expiry.
const MAX_EXPIRY_DAYS: i64 = 3650;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateApiKeyInput {
    pub name: Text<1, 100>,
    /// Scopes to grant. Combined with `key_type` when both are given; at least one of
    /// the two is required.
    #[serde(default)]
    #[schema(value_type = Option<Vec<String>>)]
    pub scopes: Option<Vec<Scope>>,
    /// `admin`, `proxy` or `read_only`: a named set of scopes.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub key_type: Option<KeyType>,
    /// 1 to 3650. Omitted: the key does not expire.
    #[serde(default)]
    pub expires_in_days: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ApiKey {
    pub id: String,
    /// Present only in the creation response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_key: Option<String>,
    pub key_prefix: String,
    pub name: String,
    #[schema(value_type = Vec<String>)]
    pub scopes: Vec<Scope>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Timestamp>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
}

/// Creates a key with scopes the caller may grant (spec 5.5); 403 otherwise.
#[utoipa::path(post, path = "/auth/api-keys", tag = "auth", request_body = CreateApiKeyInput,
    security(("bearer" = [])),
    responses((status = 201, description = "The key, with `raw_key` shown once", body = Envelope<ApiKey>),
        (status = 403, description = "A requested scope is not the caller's to grant (`scope_not_grantable`)")))]
pub async fn create_api_key(
    caller: Authorized<require::AnyScope>,
    State(state): State<AppState>,
    ApiJson(input): ApiJson<CreateApiKeyInput>,
) -> ApiResult<Response> {
    let mut wanted: Vec<Scope> = input.scopes.unwrap_or_default();
    if let Some(key_type) = input.key_type {
        wanted.extend_from_slice(key_type.scopes());
    }
    wanted.sort();
    wanted.dedup();
    if wanted.is_empty() {
        return Err(ApiError::validation(
            "scopes",
            "scopes: give at least one scope, or a key_type",
        ));
    }
    let expires_in_days = match input.expires_in_days {
        Some(days) if !(1..=MAX_EXPIRY_DAYS).contains(&days) => {
            return Err(ApiError::validation(
                "expires_in_days",
                format!("expires_in_days: must be 1 to {MAX_EXPIRY_DAYS}"),
            ))
        }
        other => other,
    };
    ensure_grantable(&caller.scopes, &wanted)?;
    let now = state.clock.now();
    let expires_at =
        expires_in_days.map(|days| Timestamp::from_millis(now.as_millis() + days * 86_400_000));
    let mut tx = state.db.begin_write().await?;
    let issued = tenancy::insert_api_key(
        &mut tx,
        &caller.tenant_id,
        &caller.actor,
        now,
        input.name.as_str(),
        &wanted,
        expires_at,
        None,
    )
    .await?;
    tx.commit().await?;
    Ok(envelope::created(ApiKey {
        id: issued.id,
        raw_key: Some(issued.raw_key),
        key_prefix: issued.key_prefix,
        name: input.name.into_inner(),
        scopes: wanted,
        expires_at,
        created_at: now,
    }))
}

/// Lists the tenant's keys; never their secrets.
#[utoipa::path(get, path = "/auth/api-keys", tag = "auth", params(PageQuery),
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "One page of keys", body = Paged<ApiKey>)))]
pub async fn list_api_keys(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Response> {
    let page: Page = query.try_into()?;
    let rows = sqlx::query(
        "SELECT id, key_prefix, name, scopes, expires_at, created_at FROM api_keys \
         WHERE tenant_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3",
    )
    .bind(&caller.tenant_id)
    .bind(page.limit)
    .bind(page.offset())
    .fetch_all(state.db.pool())
    .await?;
    let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM api_keys WHERE tenant_id = $1")
        .bind(&caller.tenant_id)
        .fetch_one(state.db.pool())
        .await?;
    let keys = rows
        .iter()
        .map(api_key_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(envelope::paged(keys, page, total))
}

/// Deletes (revokes) a key at once. A caller may delete only a key whose scopes it
/// could have granted, so a narrow key cannot revoke a wider one.
#[utoipa::path(delete, path = "/auth/api-keys/{key_id}", tag = "auth",
    params(("key_id" = String, Path)), security(("bearer" = [])),
    responses((status = 204, description = "Deleted"),
        (status = 403, description = "The key is wider than the caller (`scope_not_grantable`)")))]
pub async fn delete_api_key(
    caller: Authorized<require::AnyScope>,
    State(state): State<AppState>,
    ApiPath(key_id): ApiPath<String>,
) -> ApiResult<Response> {
    if !is_valid_id(IdKind::ApiKey, &key_id) {
        return Err(ApiError::not_found("api_key"));
    }
    let mut tx = state.db.begin_write().await?;
    let row = sqlx::query(
        "SELECT name, scopes, key_prefix FROM api_keys WHERE tenant_id = $1 AND id = $2",
    )
    .bind(&caller.tenant_id)
    .bind(&key_id)
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| ApiError::not_found("api_key"))?;
    let key_scopes = parse_scopes(&row.try_get::<String, _>("scopes")?);
    ensure_grantable(&caller.scopes, &key_scopes)?;
    // A proxy key is an API key with proxy settings: both go, and the proxies hear of it.
    sqlx::query("DELETE FROM proxy_keys WHERE tenant_id = $1 AND api_key_id = $2")
        .bind(&caller.tenant_id)
        .bind(&key_id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM api_keys WHERE tenant_id = $1 AND id = $2")
        .bind(&caller.tenant_id)
        .bind(&key_id)
        .execute(&mut *tx)
        .await?;
    let now = state.clock.now();
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "api_key.deleted",
            target_type: "api_key",
            target_id: &key_id,
            details: json!({
                "name": row.try_get::<String, _>("name")?,
                "key_prefix": row.try_get::<String, _>("key_prefix")?,
            }),
        },
        Proxies::Reload(ChangeKind::ApiKey),
    )
    .await?;
    tx.commit().await?;
    Ok(envelope::no_content())
}

fn ensure_grantable(held: &[Scope], wanted: &[Scope]) -> ApiResult<()> {
    let refused: Vec<&str> = wanted
        .iter()
        .filter(|scope| !scopes::may_grant(held, **scope))
        .map(|scope| scope.as_str())
        .collect();
    if refused.is_empty() {
        return Ok(());
    }
    Err(ApiError::new(
        ErrorCode::ScopeNotGrantable,
        format!("the caller cannot grant: {}", refused.join(", ")),
    )
    .with_details(json!({ "scopes": refused })))
}

fn api_key_from_row(row: &AnyRow) -> Result<ApiKey, sqlx::Error> {
    Ok(ApiKey {
        id: row.try_get("id")?,
        raw_key: None,
        key_prefix: row.try_get("key_prefix")?,
        name: row.try_get("name")?,
        scopes: parse_scopes(&row.try_get::<String, _>("scopes")?),
        expires_at: row
            .try_get::<Option<i64>, _>("expires_at")?
            .map(Timestamp::from_millis),
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
    })
}
