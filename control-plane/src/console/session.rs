//! The console's session: the login session token of the API (`wdn_sess_…`, one hour,
//! stored hashed) kept in an HttpOnly, SameSite=Strict cookie, and [`Signed`], the
//! extractor that turns it into the API's [`Caller`] with the scope a page needs.
//!
//! State-changing forms carry a CSRF token derived from the session token (an HMAC
//! keyed by it): a page of another site can neither read the cookie nor compute the
//! token, and the browser does not send a Strict cookie with its posts anyway.

use std::marker::PhantomData;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::page::{self, Layout, PageError};
use crate::api::auth::SESSION_TTL_SECS;
use crate::auth::cookie::{cookie, set_cookie, SameSite};
use crate::auth::{caller_for, Caller, RequiredScope};
use crate::state::AppState;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "warden_session";

/// The signed-in person behind a console request, holding `R`'s scope.
pub struct Signed<R> {
    pub caller: Caller,
    /// The session token from the cookie (what CSRF tokens are keyed by).
    pub token: String,
    _scope: PhantomData<R>,
}

impl<R> Signed<R> {
    /// The CSRF token every form of this session carries.
    pub fn csrf(&self) -> String {
        csrf_token(&self.token)
    }

    /// The page layout for this session: who is signed in, and its CSRF token.
    pub async fn layout(
        &self,
        state: &AppState,
        current: &'static str,
    ) -> Result<Layout, crate::error::ApiError> {
        let who = crate::api::auth::service::caller_name(state, &self.caller).await?;
        Ok(Layout::new(current, who, self.csrf()))
    }
}

impl<R: RequiredScope + Send> FromRequestParts<AppState> for Signed<R> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let to_sign_in = || {
            if parts.headers.contains_key("hx-request") {
                // A part of a page (htmx) asked: the whole page goes to the sign-in, and
                // back to that page afterwards, not the sign-in form into the part.
                let page = parts
                    .headers
                    .get("hx-current-url")
                    .and_then(|url| url.to_str().ok())
                    .and_then(|url| url.split_once("://"))
                    .and_then(|(_, rest)| rest.find('/').map(|at| &rest[at..]));
                let target = sign_in_target(page);
                return (StatusCode::UNAUTHORIZED, [("hx-redirect", target)]).into_response();
            }
            Redirect::to(&sign_in_target(
                parts.uri.path_and_query().map(|p| p.as_str()),
            ))
            .into_response()
        };
        let Some(token) = cookie(&parts.headers, SESSION_COOKIE) else {
            return Err(to_sign_in());
        };
        // An unknown, ended or expired session: sign in again.
        let Ok(caller) = caller_for(state, token).await else {
            return Err(to_sign_in());
        };
        if let Some(scope) = R::SCOPE {
            if !caller.has(scope) {
                return Err(PageError::forbidden(scope.as_str()).into_response());
            }
        }
        if let Some(feature) = R::FEATURE {
            if let Err(error) = crate::plans::check(&caller.plan, feature) {
                return Err(PageError::from(error).into_response());
            }
        }
        tracing::Span::current().record("tenant_id", caller.tenant_id.as_str());
        Ok(Signed {
            caller,
            token: token.to_owned(),
            _scope: PhantomData,
        })
    }
}

/// The sign-in page, coming back to `next` (a console path) afterwards.
fn sign_in_target(next: Option<&str>) -> String {
    match next.filter(|next| page::is_console_path(next)) {
        Some(next) => format!(
            "/console/sign-in?next={}",
            form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
        ),
        None => "/console/sign-in".to_owned(),
    }
}

/// The session cookie for `token`, living as long as the session does.
pub fn session_cookie(request: &HeaderMap, token: &str) -> (HeaderName, HeaderValue) {
    set_cookie(
        request,
        SESSION_COOKIE,
        token,
        SESSION_TTL_SECS,
        SameSite::Strict,
    )
}

/// `bytes` random bytes from the operating system, hex.
pub fn random_hex(bytes: usize) -> String {
    use rand::RngCore;
    let mut buffer = vec![0u8; bytes];
    rand::rngs::OsRng.fill_bytes(&mut buffer);
    warden_shared::keys::hex(&buffer)
}

/// The CSRF token of the session `token`: HMAC-SHA256 keyed by the token, hex.
pub fn csrf_token(token: &str) -> String {
    // HMAC accepts a key of any length.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(token.as_bytes()) else {
        return String::new();
    };
    mac.update(b"warden console form");
    warden_shared::keys::hex(&mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csrf_tokens_differ_per_session() {
        assert_eq!(csrf_token("a"), csrf_token("a"));
        assert_ne!(csrf_token("a"), csrf_token("b"));
        assert_eq!(csrf_token("a").len(), 64);
    }
}
