//! Signup and login: the two routes that need no credential, throttled against guessing.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, State};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::Row;
use utoipa::ToSchema;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::keys;
use warden_shared::scopes::Scope;

use crate::api::envelope::{self, Envelope};
use crate::api::extract::ApiJson;
use crate::api::validate::{Email, Password, Text};
use crate::auth::{format_scopes, parse_scopes, password};
use crate::changes::{self, AuditEvent, Author, Proxies};
use crate::db::is_unique_violation;
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::plans::Plan;
use crate::state::AppState;
use crate::tenancy::{self, NewTenant};

/// A login session lasts one hour (spec 8).
pub const SESSION_TTL_SECS: i64 = 3600;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignupInput {
    pub email: Email,
    pub password: Password,
    pub company_name: Text<1, 200>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SignupOutput {
    pub tenant_id: String,
    pub user_id: String,
    /// An `admin` API key for the new tenant, shown only in this response.
    pub api_key: String,
    pub message: String,
}

/// Creates a tenant on the `free` plan, its owner (who holds `admin`) and an admin key.
#[utoipa::path(post, path = "/auth/signup", tag = "auth", request_body = SignupInput,
    responses((status = 201, description = "Tenant, user and admin key", body = Envelope<SignupOutput>),
        (status = 409, description = "The email is registered (`email_taken`)"),
        (status = 429, description = "Too many signups from this address (`rate_limited`)")))]
pub async fn signup(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    ApiJson(input): ApiJson<SignupInput>,
) -> ApiResult<Response> {
    let now = state.clock.now();
    state
        .throttle
        .attempt(
            &format!("signup-ip:{}", peer.ip()),
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
    sqlx::query(
        "INSERT INTO users (id, tenant_id, email, password_hash, scopes, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&user_id)
    .bind(&tenant_id)
    .bind(input.email.as_str())
    .bind(&password_hash)
    .bind(format_scopes(&[Scope::Admin]))
    .bind(now.as_millis())
    .execute(&mut *tx)
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
    Ok(envelope::created(SignupOutput {
        tenant_id,
        user_id,
        api_key: key.raw_key,
        message: "Tenant created on the free plan. Store the API key now: it is not shown again."
            .to_owned(),
    }))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginInput {
    #[schema(value_type = String, format = "email")]
    pub email: String,
    #[schema(value_type = String, format = Password)]
    pub password: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LoginOutput {
    /// A `wdn_sess_` bearer token carrying the user's scopes on the management API.
    pub access_token: String,
    pub token_type: &'static str,
    pub expires_in: i64,
    pub tenant_id: String,
}

/// Exchanges email and password for a one-hour bearer session token.
///
/// A wrong password and an unknown email give the same 401 `invalid_login` after the same
/// amount of work, so the answer does not tell whether the email is registered.
#[utoipa::path(post, path = "/auth/login", tag = "auth", request_body = LoginInput,
    responses((status = 200, description = "Session token", body = Envelope<LoginOutput>),
        (status = 401, description = "Wrong email or password (`invalid_login`)"),
        (status = 429, description = "Too many attempts (`rate_limited`)")))]
pub async fn login(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    ApiJson(input): ApiJson<LoginInput>,
) -> ApiResult<Response> {
    let now = state.clock.now();
    let email = input.email.trim().to_lowercase();
    let limits = &state.config.auth;
    state
        .throttle
        .attempt(
            &format!("login-ip:{}", peer.ip()),
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
    let user =
        sqlx::query("SELECT id, tenant_id, password_hash, scopes FROM users WHERE email = $1")
            .bind(&email)
            .fetch_optional(state.db.pool())
            .await?;
    let stored_hash = user
        .as_ref()
        .map(|row| row.try_get::<String, _>("password_hash"))
        .transpose()?;
    if !password::verify(input.password, stored_hash).await? {
        return Err(invalid_login());
    }
    let Some(user) = user else {
        return Err(invalid_login());
    };
    let user_id: String = user.try_get("id")?;
    let tenant_id: String = user.try_get("tenant_id")?;
    let scopes = parse_scopes(&user.try_get::<String, _>("scopes")?);
    let token = keys::generate_session_token();
    sqlx::query(
        "INSERT INTO sessions (id, tenant_id, user_id, token_hash, scopes, expires_at, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(new_id(IdKind::Session, now.as_millis()))
    .bind(&tenant_id)
    .bind(&user_id)
    .bind(keys::hash_credential(&token))
    .bind(format_scopes(&scopes))
    .bind(now.as_millis() + SESSION_TTL_SECS * 1000)
    .bind(now.as_millis())
    .execute(state.db.pool())
    .await?;
    Ok(envelope::ok(LoginOutput {
        access_token: token,
        token_type: "bearer",
        expires_in: SESSION_TTL_SECS,
        tenant_id,
    }))
}

fn invalid_login() -> ApiError {
    ApiError::new(ErrorCode::InvalidLogin, "wrong email or password")
}
