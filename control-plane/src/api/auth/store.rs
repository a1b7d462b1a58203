//! SQL of users, sessions and API keys. Every statement filters by tenant, except the
//! login lookup by email (emails are unique across tenants).

use sqlx::any::AnyRow;
use sqlx::{AnyPool, Row};
use warden_shared::scopes::Scope;
use warden_shared::timestamp::Timestamp;

use super::ApiKey;
use crate::api::envelope::Page;
use crate::auth::{format_scopes, parse_scopes};
use crate::db::WriteTx;

pub struct NewUser<'a> {
    pub id: &'a str,
    pub tenant_id: &'a str,
    pub email: &'a str,
    pub password_hash: &'a str,
    pub scopes: &'a [Scope],
}

pub async fn insert_user(
    tx: &mut WriteTx,
    user: &NewUser<'_>,
    now: Timestamp,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO users (id, tenant_id, email, password_hash, scopes, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(user.id)
    .bind(user.tenant_id)
    .bind(user.email)
    .bind(user.password_hash)
    .bind(format_scopes(user.scopes))
    .bind(now.as_millis())
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

/// A user as login needs it.
pub struct LoginUser {
    pub id: String,
    pub tenant_id: String,
    pub password_hash: String,
    pub scopes: Vec<Scope>,
}

pub async fn user_by_email(pool: &AnyPool, email: &str) -> Result<Option<LoginUser>, sqlx::Error> {
    let Some(row) =
        sqlx::query("SELECT id, tenant_id, password_hash, scopes FROM users WHERE email = $1")
            .bind(email)
            .fetch_optional(pool)
            .await?
    else {
        return Ok(None);
    };
    Ok(Some(LoginUser {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        password_hash: row.try_get("password_hash")?,
        scopes: parse_scopes(&row.try_get::<String, _>("scopes")?),
    }))
}

/// A session about to be stored: only its token's hash.
pub struct NewSession {
    pub id: String,
    pub token_hash: String,
    pub expires_at: i64,
}

/// Stores a session carrying the user's scopes.
pub async fn insert_session(
    tx: &mut WriteTx,
    user: &LoginUser,
    session: &NewSession,
    now: Timestamp,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO sessions (id, tenant_id, user_id, token_hash, scopes, expires_at, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(&session.id)
    .bind(&user.tenant_id)
    .bind(&user.id)
    .bind(&session.token_hash)
    .bind(format_scopes(&user.scopes))
    .bind(session.expires_at)
    .bind(now.as_millis())
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

/// Ends the session whose token hashes to `token_hash`, a user's or an API key's: its
/// token stops working at once.
pub async fn delete_session(tx: &mut WriteTx, token_hash: &str) -> Result<(), sqlx::Error> {
    for sql in [
        "DELETE FROM sessions WHERE token_hash = $1",
        "DELETE FROM key_sessions WHERE token_hash = $1",
    ] {
        sqlx::query(sql).bind(token_hash).execute(&mut **tx).await?;
    }
    Ok(())
}

/// Stores a console session that acts as the API key `api_key_id`.
pub async fn insert_key_session(
    tx: &mut WriteTx,
    tenant_id: &str,
    api_key_id: &str,
    session: &NewSession,
    now: Timestamp,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO key_sessions (id, tenant_id, api_key_id, token_hash, expires_at, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&session.id)
    .bind(tenant_id)
    .bind(api_key_id)
    .bind(&session.token_hash)
    .bind(session.expires_at)
    .bind(now.as_millis())
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

/// The email of one of the tenant's users.
pub async fn user_email(
    pool: &AnyPool,
    tenant_id: &str,
    user_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT email FROM users WHERE tenant_id = $1 AND id = $2")
        .bind(tenant_id)
        .bind(user_id)
        .fetch_optional(pool)
        .await
}

/// One page of the tenant's keys, newest first; never their hashes.
pub async fn list_api_keys(
    pool: &AnyPool,
    tenant_id: &str,
    page: Page,
) -> Result<Vec<ApiKey>, sqlx::Error> {
    sqlx::query(
        "SELECT id, key_prefix, name, scopes, expires_at, created_at FROM api_keys \
         WHERE tenant_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3",
    )
    .bind(tenant_id)
    .bind(page.limit)
    .bind(page.offset())
    .fetch_all(pool)
    .await?
    .iter()
    .map(api_key_from_row)
    .collect()
}

pub async fn count_api_keys(pool: &AnyPool, tenant_id: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT COUNT(*) FROM api_keys WHERE tenant_id = $1")
        .bind(tenant_id)
        .fetch_one(pool)
        .await
}

/// What deleting a key needs to know of it.
pub struct KeyToDelete {
    pub name: String,
    pub key_prefix: String,
    pub scopes: Vec<Scope>,
}

pub async fn api_key_for_delete(
    tx: &mut WriteTx,
    tenant_id: &str,
    key_id: &str,
) -> Result<Option<KeyToDelete>, sqlx::Error> {
    let Some(row) = sqlx::query(
        "SELECT name, scopes, key_prefix FROM api_keys WHERE tenant_id = $1 AND id = $2",
    )
    .bind(tenant_id)
    .bind(key_id)
    .fetch_optional(&mut **tx)
    .await?
    else {
        return Ok(None);
    };
    Ok(Some(KeyToDelete {
        name: row.try_get("name")?,
        key_prefix: row.try_get("key_prefix")?,
        scopes: parse_scopes(&row.try_get::<String, _>("scopes")?),
    }))
}

/// Deletes the key and, when it is a proxy key, its proxy settings.
pub async fn delete_api_key(
    tx: &mut WriteTx,
    tenant_id: &str,
    key_id: &str,
) -> Result<(), sqlx::Error> {
    for sql in [
        "DELETE FROM proxy_keys WHERE tenant_id = $1 AND api_key_id = $2",
        // Console sessions signed in with the key end with it.
        "DELETE FROM key_sessions WHERE tenant_id = $1 AND api_key_id = $2",
    ] {
        sqlx::query(sql)
            .bind(tenant_id)
            .bind(key_id)
            .execute(&mut **tx)
            .await?;
    }
    sqlx::query("DELETE FROM api_keys WHERE tenant_id = $1 AND id = $2")
        .bind(tenant_id)
        .bind(key_id)
        .execute(&mut **tx)
        .await
        .map(|_| ())
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
