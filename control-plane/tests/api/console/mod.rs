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

/// The text of each cell of the table with `id`, row by row (links and markup dropped).
pub fn table(page: &Page, id: &str) -> Vec<Vec<String>> {
    let start = page
        .body
        .find(&format!("<table id=\"{id}\">"))
        .unwrap_or_else(|| panic!("no table {id} in:\n{}", page.body));
    let body = &page.body[start..];
    let body = &body[body.find("<tbody>").unwrap()..body.find("</tbody>").unwrap()];
    body.split("<tr")
        .skip(1)
        .map(|row| {
            row.split("<td")
                .skip(1)
                .map(|cell| {
                    let cell = &cell[cell.find('>').unwrap() + 1..cell.find("</td>").unwrap()];
                    text_of(cell)
                })
                .collect()
        })
        .collect()
}

/// `html` without its tags and with its entities decoded, trimmed.
pub fn text_of(html: &str) -> String {
    let mut text = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.replace("&#34;", "\"")
        .replace("&quot;", "\"")
        .replace("&#38;", "&")
        .replace("&amp;", "&")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Dollars as the console shows them: to the micro-dollar, at least cents (as
/// `console::page::usd`, written again here so a change there shows in the tests).
pub fn usd(dollars: f64) -> String {
    let micros = format!("{dollars:.6}");
    let trimmed = micros.trim_end_matches('0');
    match trimmed.len() - trimmed.find('.').unwrap() - 1 {
        0..=2 => format!("${dollars:.2}"),
        _ => format!("${trimmed}"),
    }
}

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
