//! Self-service sign-up (the API's `POST /auth/signup`): a tenant on the free plan, its
//! owner and an admin API key, which the next page shows once. The new owner is signed
//! in at once.

use std::net::SocketAddr;

use askama::Template;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::page::{self, Layout, PageError};
use super::session;
use super::sign_in::{form_pairing, paired_form};
use crate::api::auth::{service as auth, SignupInput};
use crate::error::ApiError;
use crate::state::AppState;
use crate::validate::{Email, Password, Text};

#[derive(Template)]
#[template(path = "sign_up.html")]
struct SignUpPage<'a> {
    layout: Layout,
    company: &'a str,
    email: &'a str,
    error: Option<&'a str>,
}

#[derive(Template)]
#[template(path = "signed_up.html")]
struct SignedUpPage {
    layout: Layout,
    api_key: String,
}

/// `GET /console/sign-up`.
pub async fn form(headers: HeaderMap) -> Response {
    page_with(&headers, "", "", None, StatusCode::OK)
}

fn page_with(
    headers: &HeaderMap,
    company: &str,
    email: &str,
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    let (value, cookie) = form_pairing(headers);
    let page = SignUpPage {
        layout: Layout::new("", String::new(), value),
        company,
        email,
        error,
    };
    (status, [cookie], page::render(&page)).into_response()
}

#[derive(Deserialize)]
pub struct NewAccount {
    company_name: String,
    email: String,
    password: String,
    csrf: String,
}

/// `POST /console/sign-up`: the API's signup, then a session for the new owner.
pub async fn submit(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<NewAccount>,
) -> Response {
    if !paired_form(&headers, &form.csrf) {
        return PageError::cross_site().into_response();
    }
    let again = |error: ApiError| {
        page_with(
            &headers,
            &form.company_name,
            &form.email,
            Some(&error.message),
            error.code.status(),
        )
    };
    let input = match signup_input(&form) {
        Ok(input) => input,
        Err(error) => return again(error),
    };
    let created = match auth::signup(&state, peer.ip(), input).await {
        Ok(created) => created,
        Err(error) => return again(error),
    };
    let session = match auth::session_after_signup(&state, &created, &form.email).await {
        Ok(session) => session,
        Err(error) => return PageError::from(error).into_response(),
    };
    let csrf = session::csrf_token(&session.access_token);
    let page = SignedUpPage {
        layout: Layout::new("", form.email.clone(), csrf),
        api_key: created.api_key,
    };
    let cookie = session::session_cookie(&headers, &session.access_token);
    (StatusCode::CREATED, [cookie], page::render(&page)).into_response()
}

/// The form as the API's input, with the API's rules and messages.
fn signup_input(form: &NewAccount) -> Result<SignupInput, ApiError> {
    let invalid = |field: &'static str, label: &'static str| {
        move |why: String| ApiError::validation(field, format!("{label} {why}."))
    };
    Ok(SignupInput {
        email: Email::try_from(form.email.clone()).map_err(invalid("email", "The email"))?,
        password: Password::try_from(form.password.clone())
            .map_err(invalid("password", "The password"))?,
        company_name: Text::try_from(form.company_name.trim().to_owned())
            .map_err(invalid("company_name", "The organisation name"))?,
    })
}
