//! Who is calling, and whether they may: bearer credentials, scopes, passwords, throttling.
//!
//! Every handler names the scope it needs in its signature with [`Authorized`], e.g.
//! `Authorized<require::RegistryWrite>`. The extractor authenticates the bearer token
//! (API key or login session), then checks the scope before any other input is read,
//! so a caller without the scope learns nothing about the resource (403 before 404).

pub mod cookie;
pub mod password;

use std::marker::PhantomData;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use sqlx::Row;
use warden_shared::keys::{self, CredentialKind};
use warden_shared::scopes::{self, Scope};

use crate::changes::Author;
use crate::error::{ApiError, ErrorCode};
use crate::plans::Feature;
use crate::state::AppState;

/// An authenticated caller: a credential of one tenant with its scopes.
#[derive(Debug, Clone)]
pub struct Caller {
    pub tenant_id: String,
    /// The API key id or session id that authenticated the request.
    pub credential_id: String,
    /// How the audit trail names this caller: `api_key:<id>` or `user:<id>`.
    pub actor: String,
    pub scopes: Vec<Scope>,
    /// The tenant's plan as the credential was checked (`free`, `starter`, ...).
    pub plan: String,
}

impl Caller {
    pub fn has(&self, scope: Scope) -> bool {
        scopes::satisfies(&self.scopes, scope)
    }

    /// The caller as the author of a change in its tenant's trail.
    pub fn author(&self) -> Author<'_> {
        Author {
            tenant_id: &self.tenant_id,
            actor: &self.actor,
        }
    }
}

/// The scope a route requires; implemented by the marker types in [`require`].
pub trait RequiredScope {
    /// `None` means any valid credential of the tenant may call the route.
    const SCOPE: Option<Scope>;
    /// A plan feature the route needs, checked with the credential: before the body is
    /// read, so a tenant without it gets 402 whatever it sent.
    const FEATURE: Option<Feature> = None;
}

/// Marker types naming the scope a handler requires.
pub mod require {
    use super::{Feature, RequiredScope, Scope};

    macro_rules! marker {
        ($($name:ident => $scope:expr),* $(,)?) => {$(
            #[derive(Debug)]
            pub struct $name;
            impl RequiredScope for $name {
                const SCOPE: Option<Scope> = $scope;
            }
        )*};
    }

    /// Like `marker!`, for routes that also need a plan feature.
    macro_rules! gated {
        ($($name:ident => $scope:expr, $feature:expr),* $(,)?) => {$(
            #[derive(Debug)]
            pub struct $name;
            impl RequiredScope for $name {
                const SCOPE: Option<Scope> = $scope;
                const FEATURE: Option<Feature> = Some($feature);
            }
        )*};
    }

    // `admin` on a plan with the proxy (proxy keys, managed keys, budget limits);
    // `governance:write` on a plan with risk classification; `governance:read` on a plan
    // with evidence packs.
    gated! {
        AdminWithProxy => Some(Scope::Admin), Feature::Proxy,
        GovernanceWriteWithRisk => Some(Scope::GovernanceWrite), Feature::RiskClassification,
        GovernanceReadWithEvidence => Some(Scope::GovernanceRead), Feature::EvidencePacks,
    }

    marker! {
        AnyScope => None,
        RegistryRead => Some(Scope::RegistryRead),
        RegistryWrite => Some(Scope::RegistryWrite),
        TelemetryWrite => Some(Scope::TelemetryWrite),
        MonitoringRead => Some(Scope::MonitoringRead),
        CostRead => Some(Scope::CostRead),
        GovernanceRead => Some(Scope::GovernanceRead),
        GovernanceWrite => Some(Scope::GovernanceWrite),
        AnomalyRead => Some(Scope::AnomalyRead),
        PayloadRead => Some(Scope::PayloadRead),
        PayloadWrite => Some(Scope::PayloadWrite),
        AnomalyWrite => Some(Scope::AnomalyWrite),
        Admin => Some(Scope::Admin),
        PlatformAdmin => Some(Scope::PlatformAdmin),
    }
}

/// Extracts the [`Caller`] and proves it holds `R`'s scope.
#[derive(Debug)]
pub struct Authorized<R>(pub Caller, PhantomData<R>);

impl<R> std::ops::Deref for Authorized<R> {
    type Target = Caller;

    fn deref(&self) -> &Caller {
        &self.0
    }
}

impl<R: RequiredScope> FromRequestParts<AppState> for Authorized<R> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = authenticate(parts, state).await?;
        if let Some(scope) = R::SCOPE {
            if !caller.has(scope) {
                return Err(ApiError::missing_scope(scope.as_str()));
            }
        }
        tracing::Span::current().record("tenant_id", caller.tenant_id.as_str());
        if let Some(feature) = R::FEATURE {
            crate::plans::check(&caller.plan, feature)?;
        }
        Ok(Authorized(caller, PhantomData))
    }
}

const FIND_API_KEY: &str =
    "SELECT k.id, k.tenant_id, k.key_hash AS stored_hash, k.scopes, k.expires_at, t.plan \
     FROM api_keys k JOIN tenants t ON t.id = k.tenant_id WHERE k.key_hash = $1";
/// A console session signed in with an API key acts as that key: the key's scopes,
/// and it ends when the key expires or is deleted (the join finds nothing).
const FIND_KEY_SESSION: &str =
    "SELECT s.id, s.tenant_id, s.token_hash AS stored_hash, k.scopes, s.api_key_id, t.plan, \
     CASE WHEN k.expires_at IS NOT NULL AND k.expires_at < s.expires_at THEN k.expires_at \
     ELSE s.expires_at END AS expires_at \
     FROM key_sessions s JOIN api_keys k ON k.id = s.api_key_id AND k.tenant_id = s.tenant_id \
     JOIN tenants t ON t.id = s.tenant_id WHERE s.token_hash = $1";
const FIND_SESSION: &str =
    "SELECT s.id, s.tenant_id, s.token_hash AS stored_hash, s.scopes, s.expires_at, s.user_id, t.plan \
     FROM sessions s JOIN tenants t ON t.id = s.tenant_id WHERE s.token_hash = $1";

async fn authenticate(parts: &Parts, state: &AppState) -> Result<Caller, ApiError> {
    caller_for(state, bearer_token(parts)?).await
}

/// The caller `token` (an API key or a session token) authenticates, wherever it was
/// presented: the `Authorization` header, or the console's session cookie.
pub async fn caller_for(state: &AppState, token: &str) -> Result<Caller, ApiError> {
    let kind = keys::classify(token).ok_or_else(invalid_credentials)?;
    let hash = keys::hash_credential(token);
    let find = |sql| sqlx::query(sql).bind(&hash).fetch_optional(state.db.pool());
    let (row, via) = match kind {
        CredentialKind::ApiKey => (find(FIND_API_KEY).await?, Via::ApiKey),
        CredentialKind::Session => match find(FIND_SESSION).await? {
            Some(row) => (Some(row), Via::UserSession),
            None => (find(FIND_KEY_SESSION).await?, Via::KeySession),
        },
    };
    let row = row.ok_or_else(invalid_credentials)?;
    // The lookup went by hash; compare again in constant time so that no code path
    // decides on a secret-dependent, early-exiting comparison.
    let stored_hash: String = row.try_get("stored_hash")?;
    if !keys::verify_credential(token, &stored_hash) {
        return Err(invalid_credentials());
    }
    let expires_at: Option<i64> = row.try_get("expires_at")?;
    if expires_at.is_some_and(|at| at <= state.clock.now().as_millis()) {
        return Err(ApiError::new(
            ErrorCode::ExpiredCredentials,
            "the credential has expired",
        ));
    }
    let (credential_id, actor) = match via {
        Via::ApiKey => {
            let id: String = row.try_get("id")?;
            (id.clone(), format!("api_key:{id}"))
        }
        Via::UserSession => (
            row.try_get("id")?,
            format!("user:{}", row.try_get::<String, _>("user_id")?),
        ),
        Via::KeySession => {
            let key: String = row.try_get("api_key_id")?;
            (key.clone(), format!("api_key:{key}"))
        }
    };
    Ok(Caller {
        tenant_id: row.try_get("tenant_id")?,
        credential_id,
        actor,
        scopes: parse_scopes(&row.try_get::<String, _>("scopes")?),
        plan: row.try_get("plan")?,
    })
}

/// What a token turned out to be.
enum Via {
    ApiKey,
    UserSession,
    /// A console session signed in with an API key: the caller is that key.
    KeySession,
}

fn bearer_token(parts: &Parts) -> Result<&str, ApiError> {
    let header = parts.headers.get(AUTHORIZATION).ok_or_else(|| {
        ApiError::new(
            ErrorCode::MissingCredentials,
            "send `Authorization: Bearer <API key>`",
        )
    })?;
    let value = header.to_str().map_err(|_| invalid_credentials())?;
    let (scheme, token) = value.split_once(' ').ok_or_else(invalid_credentials)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(invalid_credentials());
    }
    Ok(token.trim())
}

fn invalid_credentials() -> ApiError {
    ApiError::new(
        ErrorCode::InvalidCredentials,
        "the credential is not valid for this service",
    )
}

/// Scopes are stored as one space-separated column; unknown names (from a newer
/// version) are ignored rather than trusted.
pub fn parse_scopes(stored: &str) -> Vec<Scope> {
    stored
        .split_whitespace()
        .filter_map(|name| name.parse().ok())
        .collect()
}

pub fn format_scopes(scopes: &[Scope]) -> String {
    scopes
        .iter()
        .map(|scope| scope.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}
