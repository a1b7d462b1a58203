//! The console's session: the login session token of the API (`wdn_sess_…`, one hour,
//! stored hashed) kept in an HttpOnly, SameSite=Strict cookie, and [`Signed`], the
//! extractor that turns it into the API's [`Caller`] with the scope a page needs.
//!
//! State-changing forms carry a CSRF token derived from the session token (an HMAC
//! keyed by it): a page of another site can neither read the cookie nor compute the
//! token, and the browser does not send a Strict cookie with its posts anyway.

use std::marker::PhantomData;

use axum::extract::FromRequestParts;
use axum::http::header::{COOKIE, SET_COOKIE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::page::{self, PageError};
use crate::api::auth::SESSION_TTL_SECS;
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
}

impl<R: RequiredScope + Send> FromRequestParts<AppState> for Signed<R> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let to_sign_in = || sign_in_redirect(parts.uri.path_and_query().map(|p| p.as_str()));
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

/// To the sign-in page, coming back to `next` (a console path) afterwards.
fn sign_in_redirect(next: Option<&str>) -> Response {
    let target = match next.filter(|next| page::is_console_path(next)) {
        Some(next) => format!(
            "/console/sign-in?next={}",
            form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
        ),
        None => "/console/sign-in".to_owned(),
    };
    Redirect::to(&target).into_response()
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// Whether the browser reached the console over https (TLS ends at a load balancer in
/// front of the control plane, which says so in `X-Forwarded-Proto`): cookies are then
/// marked `Secure`. Trusting the header can only add that attribute.
pub fn over_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|value| value.to_str().ok())
        .is_some_and(|proto| proto.eq_ignore_ascii_case("https"))
}

/// A `Set-Cookie` for `name`: HttpOnly, SameSite=Strict, path `/`, for `max_age`
/// seconds (0 deletes it), `Secure` over https.
pub fn set_cookie(
    name: &str,
    value: &str,
    max_age: i64,
    secure: bool,
) -> (axum::http::HeaderName, HeaderValue) {
    let secure = if secure { "; Secure" } else { "" };
    let cookie =
        format!("{name}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}");
    // Values are tokens of ASCII letters, digits and `_`: always a valid header.
    let value = HeaderValue::from_str(&cookie).unwrap_or(HeaderValue::from_static(""));
    (SET_COOKIE, value)
}

/// The session cookie for `token`, living as long as the session does.
pub fn session_cookie(token: &str, secure: bool) -> (axum::http::HeaderName, HeaderValue) {
    set_cookie(SESSION_COOKIE, token, SESSION_TTL_SECS, secure)
}

/// The CSRF token of the session `token`: HMAC-SHA256 keyed by the token, hex.
pub fn csrf_token(token: &str) -> String {
    // HMAC accepts a key of any length.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(token.as_bytes()) else {
        return String::new();
    };
    mac.update(b"warden console form");
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.append(COOKIE, HeaderValue::from_static("a=1; warden_session=tok"));
        headers.append(COOKIE, HeaderValue::from_static("b=2"));
        assert_eq!(cookie(&headers, "warden_session"), Some("tok"));
        assert_eq!(cookie(&headers, "b"), Some("2"));
        assert_eq!(cookie(&headers, "warden"), None);
    }

    #[test]
    fn csrf_tokens_differ_per_session() {
        assert_eq!(csrf_token("a"), csrf_token("a"));
        assert_ne!(csrf_token("a"), csrf_token("b"));
        assert_eq!(csrf_token("a").len(), 64);
    }
}
