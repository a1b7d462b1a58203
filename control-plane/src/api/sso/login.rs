//! The service-provider side a browser and the IdP reach without a Warden credential:
//! the SP metadata XML, the login start (a redirect to the IdP with an AuthnRequest) and
//! the assertion consumer service, which turns a valid response into the same one-hour
//! session `POST /auth/login` gives.

use std::net::IpAddr;

use rand::RngCore;
use serde_json::json;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::scopes::Scope;

use super::saml::{self, Idp, SpUrls};
use super::store::{self, StoredConfig};
use crate::api::auth::{self as auth_api, LoginOutput};
use crate::changes::{self, AuditEvent, Author, Proxies};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::state::AppState;

/// How long an AuthnRequest waits for its response.
const REQUEST_TTL_MS: i64 = 10 * 60 * 1000;

/// The longest RelayState kept (SAML bindings, 3.4.3: 80 bytes).
pub const MAX_RELAY_STATE: usize = 80;

/// What a user provisioned by SSO may do: read everything, change nothing. An admin
/// grants more with a key of their own scopes.
pub const PROVISIONED_SCOPES: &[Scope] = &[
    Scope::RegistryRead,
    Scope::MonitoringRead,
    Scope::CostRead,
    Scope::AnomalyRead,
    Scope::GovernanceRead,
];

/// The stored password hash of a user SSO created: no password verifies against it, so
/// such a user signs in only through the IdP.
pub const NO_PASSWORD: &str = "sso-only";

/// The tenant's configuration, which must exist (404 otherwise).
async fn configured(state: &AppState, tenant_id: &str) -> ApiResult<StoredConfig> {
    store::get(state.db.pool(), tenant_id)
        .await?
        .ok_or_else(|| ApiError::not_found("sso configuration"))
}

/// The configuration of a tenant whose SSO is on (403 `sso_not_enabled` otherwise).
async fn enabled(state: &AppState, tenant_id: &str) -> ApiResult<StoredConfig> {
    let config = configured(state, tenant_id).await?;
    if !config.enabled {
        return Err(ApiError::new(
            ErrorCode::SsoNotEnabled,
            "single sign-on is not enabled for this tenant",
        ));
    }
    Ok(config)
}

fn sp(state: &AppState, tenant_id: &str) -> SpUrls {
    SpUrls::of_tenant(&state.public_url, tenant_id)
}

fn idp_of<'c>(config: &'c StoredConfig, der: &'c [u8]) -> Idp<'c> {
    Idp {
        entity_id: &config.idp_entity_id,
        sso_url: &config.idp_sso_url,
        certificate_der: der,
    }
}

fn certificate_der(config: &StoredConfig) -> ApiResult<Vec<u8>> {
    openssl::x509::X509::from_pem(config.idp_x509_cert.as_bytes())
        .and_then(|c| c.to_der())
        .map_err(ApiError::internal)
}

/// The SP metadata XML of a configured tenant.
pub async fn metadata_xml(state: &AppState, tenant_id: &str) -> ApiResult<String> {
    configured(state, tenant_id).await?;
    saml::sp_metadata(&sp(state, tenant_id)).map_err(ApiError::internal)
}

/// Starts a login: records a new AuthnRequest and answers where to send the browser.
pub async fn start(
    state: &AppState,
    peer: IpAddr,
    tenant_id: &str,
    relay_state: &str,
) -> ApiResult<String> {
    let now = state.clock.now().as_millis();
    throttle(state, peer)?;
    if relay_state.len() > MAX_RELAY_STATE {
        return Err(ApiError::validation(
            "relay_state",
            format!("relay_state: at most {MAX_RELAY_STATE} bytes"),
        ));
    }
    let config = enabled(state, tenant_id).await?;
    let der = certificate_der(&config)?;
    let request_id = random_request_id();
    let url = saml::authn_request(
        &sp(state, tenant_id),
        &idp_of(&config, &der),
        &request_id,
        relay_state,
    )
    .map_err(ApiError::internal)?;
    let mut tx = state.db.begin_write().await?;
    store::sweep(&mut tx, now).await?;
    store::insert_request(&mut tx, tenant_id, &request_id, now + REQUEST_TTL_MS).await?;
    tx.commit().await?;
    Ok(url)
}

/// Counts a login start or an ACS post against the client address's allowance
/// (`auth.sso_logins_per_ip`); 429 beyond it.
fn throttle(state: &AppState, peer: IpAddr) -> ApiResult<()> {
    state
        .throttle
        .attempt(
            &format!("sso-ip:{peer}"),
            state.config.auth.sso_logins_per_ip,
            state.clock.now().as_millis(),
        )
        .map_err(ApiError::too_many_requests)
}

/// An xs:ID of 160 random bits.
fn random_request_id() -> String {
    let mut bytes = [0u8; 20];
    rand::thread_rng().fill_bytes(&mut bytes);
    let hex = warden_shared::keys::hex(&bytes);
    format!("_{hex}")
}

/// The assertion consumer service: validates `saml_response` and answers a session for
/// the user it names, provisioning them when the configuration allows.
pub async fn consume(
    state: &AppState,
    peer: IpAddr,
    tenant_id: &str,
    saml_response: &str,
) -> ApiResult<LoginOutput> {
    // Each response costs a signature check: posts share the login starts' allowance.
    throttle(state, peer)?;
    let config = enabled(state, tenant_id).await?;
    let der = certificate_der(&config)?;
    let now = state.clock.now();
    let pending = store::pending_requests(state.db.pool(), tenant_id, now.as_millis()).await?;
    let pending: Vec<&str> = pending.iter().map(String::as_str).collect();
    let login = saml::verify_response(
        &sp(state, tenant_id),
        &idp_of(&config, &der),
        saml_response,
        &pending,
    )
    .map_err(|refused| ApiError::new(ErrorCode::SamlResponseInvalid, refused.0))?;
    let mut tx = state.db.begin_write().await?;
    if !store::consume_assertion(
        &mut tx,
        tenant_id,
        &login.assertion_id,
        login.valid_until_ms,
    )
    .await?
    {
        return Err(ApiError::new(
            ErrorCode::SamlResponseInvalid,
            "this assertion was used already (a replay)",
        ));
    }
    if !store::consume_request(&mut tx, tenant_id, &login.in_response_to).await? {
        return Err(ApiError::new(
            ErrorCode::SamlResponseInvalid,
            "the request this response answers was answered already",
        ));
    }
    let actor = format!("sso:{}", config.id);
    let author = Author {
        tenant_id,
        actor: &actor,
    };
    let user = match auth_api::user_by_email(state.db.pool(), &login.email).await? {
        Some(user) if user.tenant_id == tenant_id => user,
        Some(_) => {
            return Err(not_provisioned(
                "the email belongs to another tenant's user",
            ))
        }
        None if !config.auto_provision => {
            return Err(not_provisioned(
                "no user has this email and the tenant's SSO does not provision users",
            ))
        }
        None => {
            let user_id = new_id(IdKind::User, now.as_millis());
            auth_api::insert_user(
                &mut tx,
                &auth_api::NewUser {
                    id: &user_id,
                    tenant_id,
                    email: &login.email,
                    password_hash: NO_PASSWORD,
                    scopes: PROVISIONED_SCOPES,
                },
                now,
            )
            .await
            .map_err(|error| {
                // Two first sign-ins of one email at once: the other one created it.
                if crate::db::is_unique_violation(&error) {
                    ApiError::new(
                        ErrorCode::EmailTaken,
                        "this user was just created by another sign-in; sign in again",
                    )
                } else {
                    error.into()
                }
            })?;
            let scopes: Vec<&str> = PROVISIONED_SCOPES.iter().map(|s| s.as_str()).collect();
            changes::record(
                &mut tx,
                author,
                now,
                AuditEvent {
                    event_type: "user.created",
                    target_type: "user",
                    target_id: &user_id,
                    details: json!({ "email": login.email, "scopes": scopes, "via": "sso" }),
                },
                Proxies::Unaffected,
            )
            .await?;
            auth_api::LoginUser {
                id: user_id,
                tenant_id: tenant_id.to_owned(),
                password_hash: NO_PASSWORD.to_owned(),
                scopes: PROVISIONED_SCOPES.to_vec(),
            }
        }
    };
    changes::record(
        &mut tx,
        author,
        now,
        AuditEvent {
            event_type: "user.sso_login",
            target_type: "user",
            target_id: &user.id,
            details: json!({ "email": login.email, "assertion_id": login.assertion_id }),
        },
        Proxies::Unaffected,
    )
    .await?;
    tx.commit().await?;
    auth_api::open_session(state, &user, now).await
}

fn not_provisioned(message: &str) -> ApiError {
    ApiError::new(ErrorCode::SsoUserNotProvisioned, message)
}
