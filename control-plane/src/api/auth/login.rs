//! Handlers of signup and login: the two routes that need no credential, throttled
//! against guessing.

use std::net::SocketAddr;

use super::{service, LoginInput, LoginOutput, SignupInput, SignupOutput};

use axum::extract::{ConnectInfo, State};
use axum::response::Response;

use crate::api::envelope::{self, Envelope};
use crate::api::extract::ApiJson;
use crate::error::ApiResult;
use crate::state::AppState;

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
    let output = service::signup(&state, peer.ip(), input).await?;
    Ok(envelope::created(output))
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
    let output = service::login(&state, peer.ip(), input).await?;
    Ok(envelope::ok(output))
}
