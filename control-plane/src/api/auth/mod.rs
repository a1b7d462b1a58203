//! Authentication and API keys (spec 4.1 without SSO, 5): signup, login, `/auth/me`,
//! and creating, listing and deleting API keys under the granting rules of spec 5.5.

mod keys;
mod login;
mod service;
mod store;

pub use login::LoginOutput;
pub use service::open_session;
pub use store::{insert_user, user_by_email, LoginUser, NewUser};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(login::signup))
        .routes(routes!(login::login))
        .routes(routes!(keys::me))
        .routes(routes!(keys::list_api_keys, keys::create_api_key))
        .routes(routes!(keys::delete_api_key))
}
