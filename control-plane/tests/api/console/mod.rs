//! The console over HTTP, as a browser uses it: cookies, forms with their CSRF token and
//! the `Origin` a browser sends, redirects read rather than followed.

mod access;
mod actions;
mod anomalies;
mod billing;
mod browser;
mod compliance;
mod history;
mod keys;
mod policies;
mod records;

use reqwest::header::{HeaderMap, COOKIE, LOCATION, ORIGIN, SET_COOKIE};
use std::collections::BTreeMap;

use crate::helpers::TestApp;

/// One browser's view of the console: its cookies, kept as a browser keeps them.
pub struct Browser {
    base: String,
    client: reqwest::Client,
    pub cookies: BTreeMap<String, String>,
}

/// An answer: status, headers, body.
pub struct Page {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl Page {
    /// Where a redirect leads.
    pub fn location(&self) -> &str {
        self.headers
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// The first form's CSRF value on the page.
    pub fn csrf(&self) -> String {
        let start = self
            .body
            .find("name=\"csrf\" value=\"")
            .unwrap_or_else(|| panic!("no CSRF field on the page:\n{}", self.body));
        let rest = &self.body[start + "name=\"csrf\" value=\"".len()..];
        rest[..rest.find('"').unwrap()].to_owned()
    }
}

impl Browser {
    pub fn new(app: &TestApp) -> Browser {
        Browser {
            base: app.base.clone(),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookies: BTreeMap::new(),
        }
    }

    pub fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn keep(&mut self, response: reqwest::Response) -> Page {
        for value in response.headers().get_all(SET_COOKIE) {
            let text = value.to_str().unwrap();
            assert!(text.contains("HttpOnly"), "{text}");
            let (name, rest) = text.split_once('=').unwrap();
            // Strict, but for single sign-on's two, which arrive from the IdP's site.
            let same_site = if name.starts_with("warden_sso_") {
                "Lax"
            } else {
                "Strict"
            };
            assert!(text.contains(&format!("SameSite={same_site}")), "{text}");
            let value = rest.split(';').next().unwrap();
            if text.contains("Max-Age=0") {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_owned(), value.to_owned());
            }
        }
        Page {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.text().await.unwrap(),
        }
    }

    pub async fn get(&mut self, path: &str) -> Page {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .header(COOKIE, self.cookie_header())
            .send()
            .await
            .unwrap();
        self.keep(response).await
    }

    /// A form post from the console's own page (the `Origin` a browser sends).
    pub async fn post(&mut self, path: &str, fields: &[(&str, &str)]) -> Page {
        self.post_from(&self.base.clone(), path, fields).await
    }

    /// A form post from a page of `origin`.
    pub async fn post_from(&mut self, origin: &str, path: &str, fields: &[(&str, &str)]) -> Page {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .header(COOKIE, self.cookie_header())
            .header(ORIGIN, origin)
            .form(fields)
            .send()
            .await
            .unwrap();
        self.keep(response).await
    }

    pub fn has_session(&self) -> bool {
        self.cookies.contains_key("warden_session")
    }

    /// Signs in with an API key; panics unless it works.
    pub async fn sign_in_with_key(&mut self, key: &str) {
        let form = self.get("/console/sign-in").await;
        let signed = self
            .post(
                "/console/sign-in/key",
                &[("api_key", key), ("csrf", &form.csrf()), ("next", "")],
            )
            .await;
        assert_eq!(signed.status, 303, "{}", signed.body);
        assert_eq!(signed.location(), "/console");
        assert!(self.has_session());
    }
}
