//! SAML single sign-on (spec 2.6, 3.5, 4.1, 5.9, 7).
//!
//! Admin routes (`admin`; Enterprise and Enterprise Plus plans, others 403
//! `sso_not_in_plan`): `GET/POST /sso/config`, `POST /sso/enable` (400
//! `sso_not_configured` without a configuration), `POST /sso/disable` (keeps the
//! configuration), `GET /sso/metadata`. The IdP certificate is write-only: checked as one
//! PEM X.509 certificate valid now (422 otherwise), shown only as its SHA-256 fingerprint
//! and expiry.
//!
//! Service-provider routes, public, per tenant under `/sso/{tenant_id}/saml/`:
//! `metadata` (SP metadata XML for the IdP to import), `login` (redirects to the IdP with
//! an AuthnRequest, HTTP-Redirect binding) and `acs` (the assertion consumer service,
//! HTTP-POST binding: a valid signed response gives the same one-hour session as
//! `POST /auth/login`). See `saml.rs` for what is checked and `login.rs` for users.
//!
//! Password login keeps working for users with a password when SSO is on (an admin is
//! never locked out by an IdP's outage); users SSO provisioned have none.

mod config;
pub(crate) mod login;
mod saml;
mod store;

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::auth::LoginOutput;
use crate::api::envelope::{self, Envelope};
use crate::api::extract::{parse_json, ApiPath, ApiQuery, JsonBytes};
use crate::auth::cookie::{set_cookie, SameSite};
use crate::auth::{require, Authorized};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::validate::Text;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_config, post_config))
        .routes(routes!(enable))
        .routes(routes!(disable))
        .routes(routes!(sp_metadata))
        .routes(routes!(saml_metadata))
        .routes(routes!(saml_login))
        .routes(routes!(saml_acs))
}

/// The body of `POST /sso/config`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SsoConfigInput {
    /// The identity provider's display name (`Okta`, `Keycloak`, ...).
    pub provider_name: Text<1, 100>,
    /// The IdP's entity id: the `Issuer` of its responses.
    pub idp_entity_id: Text<1, 1000>,
    /// Where browsers are sent to sign in (the IdP's HTTP-Redirect SSO endpoint).
    pub idp_sso_url: Text<1, 2000>,
    #[serde(default)]
    pub idp_slo_url: Option<Text<1, 2000>>,
    /// The IdP's signing certificate: PEM, or the bare base64 body IdP metadata shows.
    /// Write-only; at most 16 KiB.
    #[schema(max_length = 16384)]
    pub idp_x509_cert: String,
    /// Create a user (read-only scopes) on first sign-in of an unknown email. Default
    /// true.
    #[serde(default)]
    pub auto_provision: Option<bool>,
}

/// A tenant's SSO configuration as the API shows it (never the certificate).
#[derive(Debug, Serialize, ToSchema)]
pub struct SsoConfig {
    pub id: String,
    pub provider_name: String,
    pub idp_entity_id: String,
    pub idp_sso_url: String,
    pub idp_slo_url: Option<String>,
    /// SHA-256 fingerprint of the configured certificate (`AB:CD:...`).
    pub idp_cert_sha256: String,
    /// When the configured certificate expires.
    #[schema(value_type = String, format = DateTime)]
    pub idp_cert_expires_at: Timestamp,
    pub enabled: bool,
    pub auto_provision: bool,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SsoConfigWritten {
    pub id: String,
    /// False when an existing configuration was replaced.
    pub created: bool,
}

/// The service provider as an IdP is told about it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SpMetadata {
    pub entity_id: String,
    pub acs_url: String,
    pub name_id_format: &'static str,
    /// The SP metadata XML an IdP can import.
    pub metadata_url: String,
    /// Where a browser starts signing in (`?relay_state=` optional).
    pub login_url: String,
}

#[utoipa::path(get, path = "/sso/config", tag = "sso",
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "The configuration, or `null` when there is none", body = Envelope<Option<SsoConfig>>)))]
async fn get_config(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    Ok(envelope::ok(config::get(&state, &caller).await?))
}

#[utoipa::path(post, path = "/sso/config", tag = "sso", request_body = SsoConfigInput,
    security(("bearer" = ["admin"])),
    responses((status = 201, description = "Configured", body = Envelope<SsoConfigWritten>),
        (status = 200, description = "The existing configuration replaced (`enabled` kept)", body = Envelope<SsoConfigWritten>),
        (status = 403, description = "The plan has no SSO (`sso_not_in_plan`)")))]
async fn post_config(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
    JsonBytes(body): JsonBytes,
) -> ApiResult<Response> {
    // The plan first: a tenant without SSO gets 403 whatever it sent.
    config::require_plan(&caller)?;
    let input: SsoConfigInput = parse_json(&body)?;
    let written = config::put(&state, &caller, input).await?;
    Ok(if written.created {
        envelope::created(written)
    } else {
        envelope::ok(written)
    })
}

#[utoipa::path(post, path = "/sso/enable", tag = "sso",
    security(("bearer" = ["admin"])),
    responses((status = 204, description = "Enabled"),
        (status = 400, description = "No configuration (`sso_not_configured`)"),
        (status = 403, description = "The plan has no SSO (`sso_not_in_plan`)")))]
async fn enable(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    config::require_plan(&caller)?;
    config::set_enabled(&state, &caller, true).await?;
    Ok(envelope::no_content())
}

#[utoipa::path(post, path = "/sso/disable", tag = "sso",
    security(("bearer" = ["admin"])),
    responses((status = 204, description = "Disabled; the configuration is kept"),
        (status = 400, description = "No configuration (`sso_not_configured`)")))]
async fn disable(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    config::set_enabled(&state, &caller, false).await?;
    Ok(envelope::no_content())
}

#[utoipa::path(get, path = "/sso/metadata", tag = "sso",
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "The tenant's service provider", body = Envelope<SpMetadata>)))]
async fn sp_metadata(
    caller: Authorized<require::Admin>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    Ok(envelope::ok(config::metadata(&state, &caller)))
}

#[utoipa::path(get, path = "/sso/{tenant_id}/saml/metadata", tag = "sso",
    params(("tenant_id" = String, Path)),
    responses((status = 200, description = "SAML SP metadata (XML), for the IdP to import", content_type = "application/samlmetadata+xml", body = String),
        (status = 404, description = "The tenant has no SSO configuration (`not_found`)")))]
async fn saml_metadata(
    State(state): State<AppState>,
    ApiPath(tenant_id): ApiPath<String>,
) -> ApiResult<Response> {
    let xml = login::metadata_xml(&state, &tenant_id).await?;
    Ok((
        [(header::CONTENT_TYPE, "application/samlmetadata+xml")],
        xml,
    )
        .into_response())
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
struct LoginQuery {
    /// Given back with the session (at most 80 bytes): where the client goes next.
    #[serde(default)]
    relay_state: Option<String>,
}

#[utoipa::path(get, path = "/sso/{tenant_id}/saml/login", tag = "sso",
    params(("tenant_id" = String, Path), LoginQuery),
    responses((status = 302, description = "To the IdP, with a SAMLRequest (HTTP-Redirect binding)"),
        (status = 403, description = "SSO is not enabled (`sso_not_enabled`)"),
        (status = 404, description = "The tenant has no SSO configuration (`not_found`)"),
        (status = 429, description = "Too many login starts from this address (`rate_limited`)")))]
async fn saml_login(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    ApiPath(tenant_id): ApiPath<String>,
    ApiQuery(query): ApiQuery<LoginQuery>,
) -> ApiResult<Response> {
    let relay_state = query.relay_state.unwrap_or_default();
    let url = login::start(&state, peer.ip(), &tenant_id, &relay_state).await?;
    Ok((StatusCode::FOUND, [(header::LOCATION, url)]).into_response())
}

/// What the assertion consumer service answers: the session `POST /auth/login` gives,
/// and the RelayState the login was started with.
#[derive(Debug, Serialize, ToSchema)]
pub struct SsoSession {
    #[serde(flatten)]
    pub session: LoginOutput,
    pub relay_state: Option<String>,
}

#[utoipa::path(post, path = "/sso/{tenant_id}/saml/acs", tag = "sso",
    params(("tenant_id" = String, Path)),
    request_body(content_type = "application/x-www-form-urlencoded", content = String,
        description = "`SAMLResponse` (base64) and `RelayState`, as the IdP's HTTP-POST binding posts them"),
    responses((status = 200, description = "A one-hour session, as `POST /auth/login` gives; for a login the console started (RelayState `console:<nonce>`), an HTML page that completes it in the console", body = Envelope<SsoSession>),
        (status = 401, description = "The response is not valid: signature, issuer, audience, destination, validity, request or replay (`saml_response_invalid`)"),
        (status = 403, description = "SSO is not enabled (`sso_not_enabled`), or the user is not provisioned (`sso_user_not_provisioned`)"),
        (status = 429, description = "Too many SAML logins from this address (`rate_limited`)")))]
async fn saml_acs(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    ApiPath(tenant_id): ApiPath<String>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let mut saml_response = None;
    let mut relay_state = None;
    for (name, value) in url::form_urlencoded::parse(&body) {
        match &*name {
            "SAMLResponse" => saml_response = Some(value.into_owned()),
            "RelayState" => relay_state = Some(value.into_owned()),
            _ => {}
        }
    }
    let saml_response = saml_response.ok_or_else(|| {
        ApiError::validation("SAMLResponse", "SAMLResponse: required (a form field)")
    })?;
    let session = login::consume(&state, peer.ip(), &tenant_id, &saml_response).await?;
    if let Some(nonce) = relay_state.as_deref().and_then(console_nonce) {
        return Ok(console_handoff(&headers, &session.access_token, nonce));
    }
    Ok(envelope::ok(SsoSession {
        session,
        relay_state: relay_state.filter(|r| r.len() <= login::MAX_RELAY_STATE),
    }))
}

/// The RelayState prefix of a login the console started; a nonce follows, which the
/// starting browser holds in the [`CONSOLE_BINDING_COOKIE`].
pub const CONSOLE_RELAY_PREFIX: &str = "console:";
/// The cookie, set when the console starts a login, that binds it to that browser.
pub const CONSOLE_BINDING_COOKIE: &str = "warden_sso_binding";
/// The cookie the ACS hands a console login's session over in (`<token>.<nonce>`), for
/// `/console/sso/finish` to check against the binding and turn into the session.
pub const CONSOLE_HANDOFF_COOKIE: &str = "warden_sso_handoff";

/// The nonce of a console login's RelayState (32 hex digits), if it is one.
pub fn console_nonce(relay_state: &str) -> Option<&str> {
    relay_state
        .strip_prefix(CONSOLE_RELAY_PREFIX)
        .filter(|nonce| nonce.len() == 32 && nonce.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A console login's answer: the session goes into a short-lived hand-off cookie and a
/// page of this origin moves the browser on to `/console/sso/finish`. (The IdP's post is
/// cross-site, so the console's SameSite=Strict session cookie could not be read on the
/// redirect's next request; the page's own navigation is same-site.)
fn console_handoff(request: &axum::http::HeaderMap, token: &str, nonce: &str) -> Response {
    let value = format!("{token}.{nonce}");
    let cookie = set_cookie(request, CONSOLE_HANDOFF_COOKIE, &value, 120, SameSite::Lax);
    let page = "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
        <meta http-equiv=\"refresh\" content=\"0;url=/console/sso/finish\">\
        <title>Signing in · Warden</title></head><body><main><p>Signing you in. \
        <a href=\"/console/sso/finish\">Continue</a></p></main></body></html>";
    (
        [
            cookie,
            (
                header::CONTENT_SECURITY_POLICY,
                axum::http::HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"),
            ),
            (
                header::CACHE_CONTROL,
                axum::http::HeaderValue::from_static("no-store"),
            ),
        ],
        axum::response::Html(page),
    )
        .into_response()
}
