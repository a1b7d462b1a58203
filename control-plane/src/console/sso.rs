//! Signing in to the console through the tenant's SAML IdP. The login starts here with a
//! random nonce, kept in a cookie of this browser and sent as the RelayState; the API's
//! assertion consumer answers a console login with a hand-off cookie holding the new
//! session and the nonce it was given; `finish` turns it into the console session only
//! when that nonce is this browser's own. A response posted by another site into a
//! browser that did not start the login (login CSRF) therefore signs nobody in.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{AppendHeaders, IntoResponse, Redirect, Response};
use serde::Deserialize;
use subtle::ConstantTimeEq;

use askama::Template;

use super::page::{self, Layout, PageError};
use super::session;
use crate::api::auth::service as auth;
use crate::api::sso::{
    login, CONSOLE_BINDING_COOKIE, CONSOLE_HANDOFF_COOKIE, CONSOLE_RELAY_PREFIX,
};
use crate::auth::cookie::{cookie, set_cookie, SameSite};
use crate::state::AppState;

#[derive(Deserialize)]
pub struct Organisation {
    /// The tenant's id (`ten_…`), which its administrator gives its people.
    #[serde(default)]
    organisation: String,
}

/// `GET /console/sso?organisation=ten_…`: on to the tenant's IdP.
pub async fn start(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(form): Query<Organisation>,
) -> Result<Response, PageError> {
    let nonce = session::random_hex(16);
    let relay_state = format!("{CONSOLE_RELAY_PREFIX}{nonce}");
    let url = login::start(&state, peer.ip(), form.organisation.trim(), &relay_state).await?;
    let binding = set_cookie(&headers, CONSOLE_BINDING_COOKIE, &nonce, 600, SameSite::Lax);
    // A page that moves on, not a redirect: the sign-in form's `form-action 'self'` would
    // stop a redirect to the IdP.
    let page = SsoRedirect {
        layout: Layout::new("", String::new(), String::new()),
        url,
    };
    Ok(([binding], page::render(&page)).into_response())
}

#[derive(Template)]
#[template(path = "sso_redirect.html")]
struct SsoRedirect {
    layout: Layout,
    url: String,
}

/// `GET /console/sso/finish`: the hand-off becomes the session if this browser started
/// the login.
pub async fn finish(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let handoff = cookie(&headers, CONSOLE_HANDOFF_COOKIE).and_then(|v| v.rsplit_once('.'));
    let binding = cookie(&headers, CONSOLE_BINDING_COOKIE);
    let clear = [
        set_cookie(&headers, CONSOLE_HANDOFF_COOKIE, "", 0, SameSite::Lax),
        set_cookie(&headers, CONSOLE_BINDING_COOKIE, "", 0, SameSite::Lax),
    ];
    let Some((token, nonce)) = handoff else {
        return (
            AppendHeaders(clear),
            PageError::new(
                StatusCode::BAD_REQUEST,
                "No single sign-on is under way here.",
            ),
        )
            .into_response();
    };
    let ours =
        binding.is_some_and(|binding| bool::from(binding.as_bytes().ct_eq(nonce.as_bytes())));
    if !ours {
        // A session someone else's IdP answer opened in this browser: ended unused.
        let _ = auth::close_session(&state, token).await;
        return (
            AppendHeaders(clear),
            PageError::new(
                StatusCode::FORBIDDEN,
                "This sign-in was not started from this browser, so it was refused. \
                 Start it again from the sign-in page.",
            ),
        )
            .into_response();
    }
    let [handoff, binding] = clear;
    (
        AppendHeaders([session::session_cookie(&headers, token), handoff, binding]),
        Redirect::to("/console"),
    )
        .into_response()
}
