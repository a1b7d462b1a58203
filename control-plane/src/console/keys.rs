//! Keys: the tenant's proxy keys (what agents present to the proxy) and API keys (what
//! people and scripts present to the API). A new key's secret is shown once, on the page
//! that answers its creation, with a copy button; revoking asks for confirmation.
//!
//! The forms are turned into the API's own inputs, so the API's rules and messages
//! apply unchanged.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use super::enforcement::{self, Enforced};
use super::form::Posted;
use super::page::{self, Layout, PageError};
use super::session::Signed;
use crate::api::auth::{service as auth, ApiKey};
use crate::api::envelope::Page;
use crate::api::proxy_keys::{self, ProxyKey};
use crate::auth::require;
use crate::state::AppState;

/// The page lists at most this many of each kind (the API's largest page).
const LISTED: i64 = 100;

#[derive(Template)]
#[template(path = "keys.html")]
struct KeysPage {
    layout: Layout,
    proxy_keys: Vec<ProxyKey>,
    proxy_total: i64,
    api_keys: Vec<ApiKey>,
    api_total: i64,
    notice: Option<String>,
}

#[derive(Template)]
#[template(path = "key_created.html")]
struct CreatedPage {
    layout: Layout,
    /// `proxy key` or `API key`.
    kind: &'static str,
    name: String,
    raw_key: String,
    /// What to do with it, in a sentence.
    use_it: &'static str,
    /// Whether the proxies know it yet (proxy keys).
    enforced: Option<Enforced>,
}

#[derive(Deserialize)]
pub struct Notice {
    #[serde(default)]
    revoked: Option<String>,
    #[serde(flatten)]
    enforced: Enforced,
}

/// `GET /console/keys`.
pub async fn show(
    State(state): State<AppState>,
    signed: Signed<require::Admin>,
    axum::extract::Query(notice): axum::extract::Query<Notice>,
) -> Result<Response, PageError> {
    let caller = &signed.caller;
    let page_of = Page {
        page: 1,
        limit: LISTED,
    };
    let (proxy_keys, proxy_total) =
        proxy_keys::service::list_proxy_keys(&state, caller, page_of).await?;
    let (api_keys, api_total) = auth::list_api_keys(&state, caller, page_of).await?;
    let notice = notice.revoked.map(|id| {
        let enforced = Some(notice.enforced).filter(Enforced::is_known);
        let proxies = enforced
            .map(|e| format!(" {}", e.message()))
            .unwrap_or_default();
        format!("Key {id} revoked.{proxies}")
    });
    let page = KeysPage {
        layout: signed.layout(&state, "keys").await?,
        proxy_keys,
        proxy_total,
        api_keys,
        api_total,
        notice,
    };
    Ok(page::render(&page))
}

#[derive(Deserialize)]
pub struct NewProxyKey {
    developer_label: String,
    /// Comma-separated; empty for every provider.
    #[serde(default)]
    allowed_providers: String,
    /// Comma-separated; empty for every model.
    #[serde(default)]
    allowed_models: String,
}

/// `POST /console/keys/proxy`: a proxy key (and the agent behind it), shown once.
pub async fn create_proxy_key(
    State(state): State<AppState>,
    signed: Signed<require::AdminWithProxy>,
    Posted(form): Posted<NewProxyKey>,
) -> Result<Response, PageError> {
    let mut body = json!({ "developer_label": form.developer_label.trim() });
    if let Some(list) = listed(&form.allowed_providers) {
        body["allowed_providers"] = list;
    }
    if let Some(list) = listed(&form.allowed_models) {
        body["allowed_models"] = list;
    }
    let input = api_input(body)?;
    let write = proxy_keys::service::create_proxy_key(&state, &signed.caller, input);
    let (created, enforced) = enforcement::apply(&state, write).await?;
    let page = CreatedPage {
        layout: layout(&state, &signed).await?,
        kind: "proxy key",
        name: created.developer_label,
        raw_key: created.raw_key.unwrap_or_default(),
        use_it: "Give it to the agent as its OpenAI or Anthropic API key, with the proxy as \
                 its base URL.",
        enforced: Some(enforced),
    };
    Ok((StatusCode::CREATED, page::render(&page)).into_response())
}

#[derive(Deserialize)]
pub struct NewApiKey {
    name: String,
    /// `admin`, `proxy` or `read_only`.
    key_type: String,
    /// Empty: it does not expire.
    #[serde(default)]
    expires_in_days: String,
}

/// `POST /console/keys/api`: an API key, shown once.
pub async fn create_api_key(
    State(state): State<AppState>,
    signed: Signed<require::Admin>,
    Posted(form): Posted<NewApiKey>,
) -> Result<Response, PageError> {
    let mut body = json!({ "name": form.name.trim(), "key_type": form.key_type });
    match form.expires_in_days.trim() {
        "" => {}
        days => {
            let days: i64 = days
                .parse()
                .map_err(|_| PageError::bad_form("the expiry is a number of days"))?;
            body["expires_in_days"] = json!(days);
        }
    }
    let input = api_input(body)?;
    let created = auth::create_api_key(&state, &signed.caller, input).await?;
    let page = CreatedPage {
        layout: layout(&state, &signed).await?,
        kind: "API key",
        name: created.name,
        raw_key: created.raw_key.unwrap_or_default(),
        use_it: "Send it as `Authorization: Bearer <key>` to the API, or sign in to the \
                 console with it.",
        enforced: None,
    };
    Ok((StatusCode::CREATED, page::render(&page)).into_response())
}

#[derive(Deserialize)]
pub struct Revoke {
    /// The confirmation box.
    #[serde(default)]
    confirm: String,
}

/// `POST /console/keys/{kind}/{id}/revoke`: `kind` is `proxy` or `api`.
pub async fn revoke(
    State(state): State<AppState>,
    signed: Signed<require::Admin>,
    Path((kind, id)): Path<(String, String)>,
    Posted(form): Posted<Revoke>,
) -> Result<Response, PageError> {
    if form.confirm != "yes" {
        return Err(PageError::bad_form(
            "tick the box to confirm the revocation; nothing was changed",
        ));
    }
    let caller = &signed.caller;
    let ((), enforced) = match kind.as_str() {
        "proxy" => {
            let write = proxy_keys::service::delete_proxy_key(&state, caller, &id);
            enforcement::apply(&state, write).await?
        }
        "api" => enforcement::apply(&state, auth::delete_api_key(&state, caller, &id)).await?,
        _ => {
            return Err(PageError::new(
                StatusCode::NOT_FOUND,
                "No such kind of key.",
            ))
        }
    };
    let target = format!("/console/keys?revoked={id}&{}", enforced.query());
    Ok(Redirect::to(&target).into_response())
}

/// `text` split at commas, trimmed, as a JSON list; `None` when it names nothing.
fn listed(text: &str) -> Option<Value> {
    let items: Vec<&str> = text
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .collect();
    (!items.is_empty()).then(|| json!(items))
}

/// The API's input type read from `body`, with its messages when it does not fit.
fn api_input<T: DeserializeOwned>(body: Value) -> Result<T, PageError> {
    serde_json::from_value(body).map_err(|error| PageError::bad_form(&error.to_string()))
}

async fn layout<R>(state: &AppState, signed: &Signed<R>) -> Result<Layout, PageError> {
    Ok(signed.layout(state, "keys").await?)
}
