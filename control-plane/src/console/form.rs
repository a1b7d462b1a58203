//! [`Posted`]: a console form, accepted only from the console itself. A post must come
//! from the same origin (`Sec-Fetch-Site`, or `Origin` against `Host`, when the browser
//! sends them) and carry the session's CSRF token in its `csrf` field; the rest of the
//! form is read into `T`. Anything else is refused with a page saying so, and nothing
//! is changed.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::header::{HOST, ORIGIN};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use subtle::ConstantTimeEq;

use super::filters::{given_pairs, read_pairs};
use super::page::PageError;
use super::session::{csrf_token, SESSION_COOKIE};
use crate::auth::cookie::cookie;
use crate::state::AppState;

/// The largest console form read: a FRIA is six texts of up to 10,000 characters.
const MAX_FORM_BYTES: usize = 128 * 1024;

pub struct Posted<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for Posted<T> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Response> {
        let headers = request.headers().clone();
        if !same_origin(&headers) {
            return Err(PageError::cross_site().into_response());
        }
        let body = Bytes::from_request(request, state)
            .await
            .map_err(|_| PageError::bad_form("the form could not be read").into_response())?;
        if body.len() > MAX_FORM_BYTES {
            return Err(PageError::bad_form("the form is too large").into_response());
        }
        let expected = cookie(&headers, SESSION_COOKIE).map(csrf_token);
        let sent = form_urlencoded::parse(&body)
            .find(|(key, _)| key == "csrf")
            .map(|(_, value)| value.into_owned());
        let matches = match (expected, sent) {
            (Some(expected), Some(sent)) => bool::from(expected.as_bytes().ct_eq(sent.as_bytes())),
            _ => false,
        };
        if !matches {
            return Err(PageError::cross_site().into_response());
        }
        // The token is checked; fields left empty are absent, as an API body would
        // leave them out. What remains is read as the API's own input type.
        read_pairs(&given_pairs(&body, "csrf"))
            .map(Posted)
            .map_err(|error| PageError::bad_form(&error.to_string()).into_response())
    }
}

/// Whether the browser says the request comes from a page of this origin. Browsers send
/// `Sec-Fetch-Site` (all current ones) or at least `Origin` on a post; a client that
/// sends neither is not a browser another site could drive.
pub fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return site.as_bytes() == b"same-origin";
    }
    match (headers.get(ORIGIN), headers.get(HOST)) {
        (Some(origin), Some(host)) => origin
            .to_str()
            .ok()
            .and_then(|origin| origin.split_once("://"))
            .is_some_and(|(_, authority)| authority.as_bytes() == host.as_bytes()),
        (Some(_), None) => false,
        (None, _) => true,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn only_posts_of_this_origin_pass() {
        assert!(same_origin(&headers(&[("sec-fetch-site", "same-origin")])));
        assert!(!same_origin(&headers(&[("sec-fetch-site", "cross-site")])));
        assert!(!same_origin(&headers(&[("sec-fetch-site", "same-site")])));
        assert!(same_origin(&headers(&[
            ("origin", "http://127.0.0.1:8080"),
            ("host", "127.0.0.1:8080")
        ])));
        assert!(!same_origin(&headers(&[
            ("origin", "https://evil.example"),
            ("host", "127.0.0.1:8080")
        ])));
        assert!(!same_origin(&headers(&[("origin", "null"), ("host", "a")])));
        assert!(same_origin(&headers(&[])));
    }
}
