//! The rules of authentication: throttles, signup's tenant and owner, login sessions,
//! and API keys under the granting rules of spec 5.5.

use std::net::IpAddr;

use serde_json::json;
use warden_shared::ids::{is_valid_id, new_id, IdKind};
use warden_shared::keys;
use warden_shared::scopes::{self, Scope};
use warden_shared::timestamp::Timestamp;

use super::store;
use super::{
    ApiKey, CreateApiKeyInput, LoginInput, LoginOutput, SignupInput, SignupOutput, SESSION_TTL_SECS,
};
use crate::api::envelope::Page;
use crate::auth::{password, Caller};
use crate::changes::{self, AuditEvent, Author, ChangeKind, Proxies};
use crate::db::is_unique_violation;
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::plans::Plan;
use crate::state::AppState;
use crate::tenancy::{self, NewTenant};

/// Keys expire after at most ten years; omitting `expires_in_days` means no expiry.
const MAX_EXPIRY_DAYS: i64 = 3650;

/// Creates a tenant on the `free` plan, its owner (who holds `admin`) and an admin key.
pub async fn signup(state: &AppState, peer: IpAddr, input: SignupInput) -> ApiResult<SignupOutput> {
    let now = state.clock.now();
    state
        .throttle
        .attempt(
            &format!("signup-ip:{}", peer),
            state.config.auth.signups_per_ip,
            now.as_millis(),
        )
        .map_err(ApiError::too_many_requests)?;
    let password_hash = password::hash(input.password.expose().to_owned()).await?;
    let user_id = new_id(IdKind::User, now.as_millis());
    let actor = format!("user:{user_id}");
    let mut tx = state.db.begin_write().await?;
    let tenant_id = tenancy::insert_tenant(
        &mut tx,
        &actor,
        now,
        &NewTenant {
            company_name: input.company_name.as_str(),
            owner_email: Some(input.email.as_str()),
            plan: Plan::Free,
            agent_limit: Plan::Free.default_agent_limit(),
            is_platform: false,
        },
    )
    .await?;
    let owner = store::NewUser {
        id: &user_id,
        tenant_id: &tenant_id,
        email: input.email.as_str(),
        password_hash: &password_hash,
        scopes: &[Scope::Admin],
    };
    store::insert_user(&mut tx, &owner, now)
        .await
        .map_err(|error| {
            if is_unique_violation(&error) {
                ApiError::new(
                    ErrorCode::EmailTaken,
                    "an account with this email exists; log in instead",
                )
            } else {
                error.into()
            }
        })?;
    changes::record(
        &mut tx,
        Author {
            tenant_id: &tenant_id,
            actor: &actor,
        },
        now,
        AuditEvent {
            event_type: "user.created",
            target_type: "user",
            target_id: &user_id,
            details: json!({ "email": input.email.as_str(), "scopes": ["admin"] }),
        },
        Proxies::Unaffected,
    )
    .await?;
    let key = tenancy::insert_api_key(
        &mut tx,
        &tenant_id,
        &actor,
        now,
        "signup admin key",
        &[Scope::Admin],
        None,
        None,
    )
    .await?;
    tx.commit().await?;
    Ok(SignupOutput {
        tenant_id,
        user_id,
        api_key: key.raw_key,
        message: "Tenant created on the free plan. Store the API key now: it is not shown again."
            .to_owned(),
    })
}

/// Exchanges email and password for a one-hour session token. A wrong password and an
/// unknown email fail alike after the same amount of work.
pub async fn login(state: &AppState, peer: IpAddr, input: LoginInput) -> ApiResult<LoginOutput> {
    let now = state.clock.now();
    let email = input.email.trim().to_lowercase();
    let limits = &state.config.auth;
    state
        .throttle
        .attempt(
            &format!("login-ip:{}", peer),
            limits.login_attempts_per_ip,
            now.as_millis(),
        )
        .and_then(|()| {
            state.throttle.attempt(
                &format!("login-email:{email}"),
                limits.login_attempts_per_email,
                now.as_millis(),
            )
        })
        .map_err(ApiError::too_many_requests)?;
    if input.password.len() > 1024 || email.len() > 254 {
        return Err(invalid_login());
    }
    let user = store::user_by_email(state.db.pool(), &email).await?;
    let stored_hash = user.as_ref().map(|user| user.password_hash.clone());
    if !password::verify(input.password, stored_hash).await? {
        return Err(invalid_login());
    }
    let Some(user) = user else {
        return Err(invalid_login());
    };
    open_session(state, &user, now).await
}

/// A session for the owner `signup` made for `created` a moment ago in the same request:
/// their password was just set, so it is not hashed and checked a second time.
pub async fn session_after_signup(
    state: &AppState,
    created: &SignupOutput,
    email: &str,
) -> ApiResult<LoginOutput> {
    let email = email.trim().to_lowercase();
    let user = store::user_by_email(state.db.pool(), &email)
        .await?
        .filter(|user| user.id == created.user_id)
        .ok_or_else(invalid_login)?;
    open_session(state, &user, state.clock.now()).await
}

/// A new one-hour session for `user`, stored by its token's hash: what a password login
/// and a SAML sign-in answer.
pub async fn open_session(
    state: &AppState,
    user: &store::LoginUser,
    now: Timestamp,
) -> ApiResult<LoginOutput> {
    let token = keys::generate_session_token();
    let session = store::NewSession {
        id: new_id(IdKind::Session, now.as_millis()),
        token_hash: keys::hash_credential(&token),
        expires_at: now.as_millis() + SESSION_TTL_SECS * 1000,
    };
    let mut tx = state.db.begin_write().await?;
    store::insert_session(&mut tx, user, &session, now).await?;
    tx.commit().await?;
    Ok(LoginOutput {
        access_token: token,
        token_type: "bearer",
        expires_in: SESSION_TTL_SECS,
        tenant_id: user.tenant_id.clone(),
    })
}

/// A one-hour console session acting as the API key `raw_key` (for platform operators
/// and tenants without users): the key is checked as on any request, and the session
/// has its scopes, ends on sign-out, and ends with the key.
pub async fn open_key_session(state: &AppState, raw_key: &str) -> ApiResult<LoginOutput> {
    let invalid = || ApiError::new(ErrorCode::InvalidCredentials, "the API key is not valid");
    if keys::classify(raw_key) != Some(keys::CredentialKind::ApiKey) {
        return Err(invalid());
    }
    let caller = crate::auth::caller_for(state, raw_key)
        .await
        .map_err(|_| invalid())?;
    let now = state.clock.now();
    let token = keys::generate_session_token();
    let session = store::NewSession {
        id: new_id(IdKind::Session, now.as_millis()),
        token_hash: keys::hash_credential(&token),
        expires_at: now.as_millis() + SESSION_TTL_SECS * 1000,
    };
    let mut tx = state.db.begin_write().await?;
    store::insert_key_session(
        &mut tx,
        &caller.tenant_id,
        &caller.credential_id,
        &session,
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(LoginOutput {
        access_token: token,
        token_type: "bearer",
        expires_in: SESSION_TTL_SECS,
        tenant_id: caller.tenant_id,
    })
}

/// Ends the session `token` opened (signing out of the console): its row goes, so the
/// token stops working at once. An unknown token changes nothing.
pub async fn close_session(state: &AppState, token: &str) -> ApiResult<()> {
    let mut tx = state.db.begin_write().await?;
    store::delete_session(&mut tx, &keys::hash_credential(token)).await?;
    Ok(tx.commit().await?)
}

/// How to name the caller to a person: a user's email, or the API key's id.
pub async fn caller_name(state: &AppState, caller: &Caller) -> ApiResult<String> {
    if let Some(user_id) = caller.actor.strip_prefix("user:") {
        let email = store::user_email(state.db.pool(), &caller.tenant_id, user_id).await?;
        return Ok(email.unwrap_or_else(|| caller.actor.clone()));
    }
    Ok(format!("API key {}", caller.credential_id))
}

/// Creates a key with scopes the caller may grant; the raw key is only in this value.
pub async fn create_api_key(
    state: &AppState,
    caller: &Caller,
    input: CreateApiKeyInput,
) -> ApiResult<ApiKey> {
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
    Ok(ApiKey {
        id: issued.id,
        raw_key: Some(issued.raw_key),
        key_prefix: issued.key_prefix,
        name: input.name.into_inner(),
        scopes: wanted,
        expires_at,
        created_at: now,
    })
}

pub async fn list_api_keys(
    state: &AppState,
    caller: &Caller,
    page: Page,
) -> ApiResult<(Vec<ApiKey>, i64)> {
    let keys = store::list_api_keys(state.db.pool(), &caller.tenant_id, page).await?;
    let total = store::count_api_keys(state.db.pool(), &caller.tenant_id).await?;
    Ok((keys, total))
}

/// Deletes (revokes) a key at once; only a key whose scopes the caller could have
/// granted, so a narrow key cannot revoke a wider one.
pub async fn delete_api_key(state: &AppState, caller: &Caller, key_id: &str) -> ApiResult<()> {
    if !is_valid_id(IdKind::ApiKey, key_id) {
        return Err(ApiError::not_found("api_key"));
    }
    let mut tx = state.db.begin_write().await?;
    let key = store::api_key_for_delete(&mut tx, &caller.tenant_id, key_id)
        .await?
        .ok_or_else(|| ApiError::not_found("api_key"))?;
    ensure_grantable(&caller.scopes, &key.scopes)?;
    // A proxy key is an API key with proxy settings: both go, and the proxies hear of it.
    store::delete_api_key(&mut tx, &caller.tenant_id, key_id).await?;
    let now = state.clock.now();
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: "api_key.deleted",
            target_type: "api_key",
            target_id: key_id,
            details: json!({
                "name": key.name,
                "key_prefix": key.key_prefix,
            }),
        },
        Proxies::Reload(ChangeKind::ApiKey),
    )
    .await?;
    tx.commit().await?;
    Ok(())
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

fn invalid_login() -> ApiError {
    ApiError::new(ErrorCode::InvalidLogin, "wrong email or password")
}
