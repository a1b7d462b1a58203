//! Signing in and out. Signing in with email and password is the API's login (same
//! throttles, same one-hour session), its token kept in the session cookie; signing out
//! deletes the session, so the token is dead even where a copy of the cookie survives.
//!
//! The sign-in form has no session to key a CSRF token by: it carries a random value
//! that must match a cookie set with the form (a double submit), besides the
//! same-origin check every console post passes.

use std::net::SocketAddr;

use askama::Template;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{AppendHeaders, IntoResponse, Redirect, Response};
use serde::Deserialize;
use subtle::ConstantTimeEq;

use super::form::{same_origin, Posted};
use super::page::{self, Layout, PageError};
use super::session::{self, Signed, SESSION_COOKIE};
use crate::api::auth::{service as auth, LoginInput};
use crate::auth::cookie::{cookie, set_cookie, SameSite};
use crate::auth::require;
use crate::error::ErrorCode;
use crate::state::AppState;

/// The sign-in form's double-submit cookie.
const SIGN_IN_COOKIE: &str = "warden_sign_in";

#[derive(Template)]
#[template(path = "sign_in.html")]
struct SignInPage<'a> {
    layout: Layout,
    next: &'a str,
    email: &'a str,
    error: Option<&'a str>,
}

#[derive(Deserialize)]
pub struct Next {
    next: Option<String>,
}

/// `GET /console/sign-in`.
pub async fn form(headers: HeaderMap, Query(query): Query<Next>) -> Response {
    sign_in_page(
        &headers,
        query.next.as_deref().unwrap_or(""),
        "",
        None,
        StatusCode::OK,
    )
}

fn sign_in_page(
    headers: &HeaderMap,
    next: &str,
    email: &str,
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    let (value, cookie) = form_pairing(headers);
    let page = SignInPage {
        layout: Layout::new("", String::new(), value),
        next: if page::is_console_path(next) {
            next
        } else {
            ""
        },
        email,
        error,
    };
    (status, [cookie], page::render(&page)).into_response()
}

/// The value a form without a session carries and the cookie that pairs with it.
pub fn form_pairing(headers: &HeaderMap) -> (String, (HeaderName, HeaderValue)) {
    let value = session::random_hex(32);
    let cookie = set_cookie(headers, SIGN_IN_COOKIE, &value, 3600, SameSite::Strict);
    (value, cookie)
}

/// Whether a form without a session comes from this console: same origin, and its
/// `csrf` value is the one its cookie holds.
pub fn paired_form(headers: &HeaderMap, sent: &str) -> bool {
    let paired = cookie(headers, SIGN_IN_COOKIE)
        .is_some_and(|expected| bool::from(expected.as_bytes().ct_eq(sent.as_bytes())));
    same_origin(headers) && paired
}

/// Signs the person in: the session cookie, the pairing cookie dropped, on to `next`.
pub fn signed_in(headers: &HeaderMap, token: &str, next: &str) -> Response {
    // Two cookies: appended, since a plain header list keeps only the last.
    (
        AppendHeaders([
            session::session_cookie(headers, token),
            set_cookie(headers, SIGN_IN_COOKIE, "", 0, SameSite::Strict),
        ]),
        Redirect::to(next),
    )
        .into_response()
}

#[derive(Deserialize)]
pub struct Credentials {
    email: String,
    password: String,
    csrf: String,
    #[serde(default)]
    next: String,
}

/// `POST /console/sign-in`: the API's login, then the session cookie.
pub async fn submit(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<Credentials>,
) -> Response {
    if !paired_form(&headers, &form.csrf) {
        return PageError::cross_site().into_response();
    }
    let input = LoginInput {
        email: form.email.clone(),
        password: form.password,
    };
    match auth::login(&state, peer.ip(), input).await {
        Ok(session) => {
            let next = if page::is_console_path(&form.next) {
                form.next.as_str()
            } else {
                "/console"
            };
            signed_in(&headers, &session.access_token, next)
        }
        Err(error) => {
            let (status, message) = match error.code {
                ErrorCode::InvalidLogin => (
                    StatusCode::UNAUTHORIZED,
                    "The email or the password is wrong.".to_owned(),
                ),
                _ => (error.code.status(), error.message),
            };
            sign_in_page(&headers, &form.next, &form.email, Some(&message), status)
        }
    }
}

#[derive(Deserialize)]
pub struct KeyCredentials {
    api_key: String,
    csrf: String,
    #[serde(default)]
    next: String,
}

/// `POST /console/sign-in/key`: a session acting as an API key.
pub async fn submit_key(
    State(state): State<AppState>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<KeyCredentials>,
) -> Response {
    if !paired_form(&headers, &form.csrf) {
        return PageError::cross_site().into_response();
    }
    match auth::open_key_session(&state, form.api_key.trim()).await {
        Ok(session) => {
            let next = if page::is_console_path(&form.next) {
                form.next.as_str()
            } else {
                "/console"
            };
            signed_in(&headers, &session.access_token, next)
        }
        Err(error) => sign_in_page(
            &headers,
            &form.next,
            "",
            Some("That API key is not valid (or has expired)."),
            error.code.status(),
        ),
    }
}

#[derive(Deserialize)]
pub struct SignOut {}

/// `POST /console/sign-out`: ends the session on the server and drops the cookie.
pub async fn sign_out(
    State(state): State<AppState>,
    headers: HeaderMap,
    signed: Signed<require::AnyScope>,
    Posted(SignOut {}): Posted<SignOut>,
) -> Response {
    if let Err(error) = auth::close_session(&state, &signed.token).await {
        return PageError::from(error).into_response();
    }
    let cookie = set_cookie(&headers, SESSION_COOKIE, "", 0, SameSite::Strict);
    ([cookie], Redirect::to("/console/sign-in")).into_response()
}
