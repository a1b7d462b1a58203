//! Authentication and API keys (spec 4.1 without SSO, 5): signup, login, `/auth/me`,
//! and creating, listing and deleting API keys under the granting rules of spec 5.5.

mod keys;
mod login;
pub(crate) mod service;
mod store;

use serde::{Deserialize, Serialize};
pub use service::open_session;
pub use store::{insert_user, user_by_email, LoginUser, NewUser};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::scopes::{KeyType, Scope};
use warden_shared::timestamp::Timestamp;

use crate::state::AppState;
use crate::validate::{Email, Password, Text};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(login::signup))
        .routes(routes!(login::login))
        .routes(routes!(keys::me))
        .routes(routes!(keys::list_api_keys, keys::create_api_key))
        .routes(routes!(keys::delete_api_key))
}

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

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({ "name": "dashboard", "scopes": ["registry:read"], "expires_in_days": 30 }))]
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
    #[schema(minimum = 1, maximum = 3650)]
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
