//! The admin side of SSO: the tenant's IdP configuration, enabling and disabling it, and
//! the SP's metadata as JSON. Every change is audited.

use openssl::asn1::Asn1Time;
use openssl::hash::MessageDigest;
use openssl::x509::X509;
use serde_json::json;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::timestamp::Timestamp;

use super::store::{self, StoredConfig};
use super::{saml, SpMetadata, SsoConfig, SsoConfigInput, SsoConfigWritten};
use crate::auth::Caller;
use crate::changes::{self, AuditEvent, Proxies};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::plans::Plan;
use crate::state::AppState;

/// The largest certificate accepted, PEM.
const MAX_CERT_BYTES: usize = 16 * 1024;

/// 403 `sso_not_in_plan` unless the caller's plan includes SSO (Enterprise and above).
pub fn require_plan(caller: &Caller) -> ApiResult<()> {
    if Plan::parse(&caller.plan).is_some_and(|plan| plan.features().sso) {
        return Ok(());
    }
    Err(ApiError::new(
        ErrorCode::SsoNotInPlan,
        "SAML single sign-on needs the Enterprise plan or above",
    ))
}

pub async fn get(state: &AppState, caller: &Caller) -> ApiResult<Option<SsoConfig>> {
    let Some(stored) = store::get(state.db.pool(), &caller.tenant_id).await? else {
        return Ok(None);
    };
    Ok(Some(render(&stored)?))
}

/// Creates or replaces the configuration; `enabled` is kept (false for a new one).
pub async fn put(
    state: &AppState,
    caller: &Caller,
    input: SsoConfigInput,
) -> ApiResult<SsoConfigWritten> {
    let certificate = check_certificate(&input.idp_x509_cert, state.clock.now().as_millis())?;
    let sso_url = check_url("idp_sso_url", input.idp_sso_url.as_str())?;
    let slo_url = input
        .idp_slo_url
        .as_ref()
        .map(|url| check_url("idp_slo_url", url.as_str()))
        .transpose()?;
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let existing = store::get_for_update(&mut tx, &caller.tenant_id).await?;
    let created = existing.is_none();
    let config = StoredConfig {
        id: existing.as_ref().map_or_else(
            || new_id(IdKind::SsoConfig, now.as_millis()),
            |c| c.id.clone(),
        ),
        tenant_id: caller.tenant_id.clone(),
        provider_name: input.provider_name.into_inner(),
        idp_entity_id: input.idp_entity_id.into_inner(),
        idp_sso_url: sso_url,
        idp_slo_url: slo_url,
        idp_x509_cert: certificate.pem,
        enabled: existing.as_ref().is_some_and(|c| c.enabled),
        auto_provision: input.auto_provision.unwrap_or(true),
        created_at: existing.as_ref().map_or(now, |c| c.created_at),
        updated_at: now,
    };
    if created {
        store::insert(&mut tx, &config).await?;
    } else {
        store::update(&mut tx, &config).await?;
    }
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: if created {
                "sso.configured"
            } else {
                "sso.updated"
            },
            target_type: "sso_config",
            target_id: &config.id,
            details: json!({
                "provider_name": config.provider_name,
                "idp_entity_id": config.idp_entity_id,
                "idp_sso_url": config.idp_sso_url,
                "idp_cert_sha256": certificate.sha256,
                "auto_provision": config.auto_provision,
            }),
        },
        Proxies::Unaffected,
    )
    .await?;
    tx.commit().await?;
    Ok(SsoConfigWritten {
        id: config.id,
        created,
    })
}

/// Turns SSO on or off; 400 `sso_not_configured` without a configuration.
pub async fn set_enabled(state: &AppState, caller: &Caller, enabled: bool) -> ApiResult<()> {
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    let Some(config) = store::get_for_update(&mut tx, &caller.tenant_id).await? else {
        return Err(ApiError::new(
            ErrorCode::SsoNotConfigured,
            "configure SSO (POST /sso/config) before enabling or disabling it",
        ));
    };
    store::set_enabled(&mut tx, &caller.tenant_id, enabled, now).await?;
    changes::record(
        &mut tx,
        caller.author(),
        now,
        AuditEvent {
            event_type: if enabled {
                "sso.enabled"
            } else {
                "sso.disabled"
            },
            target_type: "sso_config",
            target_id: &config.id,
            details: json!({ "was_enabled": config.enabled }),
        },
        Proxies::Unaffected,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

pub fn metadata(state: &AppState, caller: &Caller) -> SpMetadata {
    let sp = saml::SpUrls::of_tenant(&state.public_url, &caller.tenant_id);
    SpMetadata {
        // The entity id is the metadata's own address (`saml::SpUrls`).
        metadata_url: sp.entity_id.clone(),
        entity_id: sp.entity_id,
        acs_url: sp.acs_url,
        name_id_format: saml::NAME_ID_FORMAT,
        login_url: format!(
            "{}/api/v1/sso/{}/saml/login",
            state.public_url, caller.tenant_id
        ),
    }
}

fn render(stored: &StoredConfig) -> ApiResult<SsoConfig> {
    let certificate =
        X509::from_pem(stored.idp_x509_cert.as_bytes()).map_err(ApiError::internal)?;
    Ok(SsoConfig {
        id: stored.id.clone(),
        provider_name: stored.provider_name.clone(),
        idp_entity_id: stored.idp_entity_id.clone(),
        idp_sso_url: stored.idp_sso_url.clone(),
        idp_slo_url: stored.idp_slo_url.clone(),
        idp_cert_sha256: fingerprint(&certificate)?,
        idp_cert_expires_at: unix_time(certificate.not_after())?,
        enabled: stored.enabled,
        auto_provision: stored.auto_provision,
        created_at: stored.created_at,
        updated_at: stored.updated_at,
    })
}

/// A certificate as accepted: normalised PEM and its SHA-256 fingerprint.
pub struct CheckedCertificate {
    pub pem: String,
    pub sha256: String,
}

/// One PEM X.509 certificate, valid now: 422 otherwise.
fn check_certificate(text: &str, now_ms: i64) -> ApiResult<CheckedCertificate> {
    let invalid =
        |message: &str| ApiError::validation("idp_x509_cert", format!("idp_x509_cert: {message}"));
    if text.len() > MAX_CERT_BYTES {
        return Err(invalid("at most 16 KiB"));
    }
    // IdPs' metadata often shows the bare base64 body: accept it as PEM's content.
    let pem = if text.contains("-----BEGIN CERTIFICATE-----") {
        text.to_owned()
    } else {
        let body: String = text.split_ascii_whitespace().collect();
        format!("-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n")
    };
    let certificate = X509::from_pem(pem.as_bytes())
        .map_err(|_| invalid("must be one X.509 certificate in PEM form"))?;
    let now = Asn1Time::from_unix(now_ms / 1000).map_err(ApiError::internal)?;
    if certificate.not_after() < now {
        return Err(invalid(&format!(
            "the certificate expired on {}",
            certificate.not_after()
        )));
    }
    if certificate.not_before() > now {
        return Err(invalid(&format!(
            "the certificate is valid only from {}",
            certificate.not_before()
        )));
    }
    let pem = certificate.to_pem().map_err(ApiError::internal)?;
    Ok(CheckedCertificate {
        pem: String::from_utf8(pem).map_err(ApiError::internal)?,
        sha256: fingerprint(&certificate)?,
    })
}

/// An ASN.1 time as a timestamp: ISO 8601 UTC in answers, like every other time.
fn unix_time(time: &openssl::asn1::Asn1TimeRef) -> ApiResult<Timestamp> {
    let epoch = Asn1Time::from_unix(0).map_err(ApiError::internal)?;
    let since = epoch.diff(time).map_err(ApiError::internal)?;
    let secs = i64::from(since.days) * 86_400 + i64::from(since.secs);
    Ok(Timestamp::from_millis(secs * 1000))
}

fn fingerprint(certificate: &X509) -> ApiResult<String> {
    let digest = certificate
        .digest(MessageDigest::sha256())
        .map_err(ApiError::internal)?;
    Ok(digest
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":"))
}

/// An absolute http(s) URL with a host, as given. Browsers follow it, Warden never does:
/// its form is checked, not where it leads.
fn check_url(field: &str, text: &str) -> ApiResult<String> {
    crate::outbound::guard::parse_http_url(text)
        .map(|_| text.to_owned())
        .map_err(|_| {
            ApiError::validation(
                field,
                format!("{field}: must be an absolute http or https URL"),
            )
        })
}
