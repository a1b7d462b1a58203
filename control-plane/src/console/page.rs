//! What every page shares: the layout's values, rendering a template into an answer,
//! the error page, and how times read to a person.

use askama::Template;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};

use super::assets;
use crate::error::ApiError;

/// The values `base.html` needs: assets, navigation, who is signed in, the CSRF token.
pub struct Layout {
    pub css: String,
    pub icon: String,
    pub htmx: String,
    pub sse: String,
    pub script: String,
    /// Which navigation entry is the current page (`overview`, `approvals`, `agents`).
    pub current: &'static str,
    /// The signed-in person's name; empty on the sign-in page.
    pub who: String,
    pub csrf: String,
}

impl Layout {
    pub fn new(current: &'static str, who: String, csrf: String) -> Layout {
        Layout {
            css: assets::url("console.css"),
            icon: assets::url("favicon.svg"),
            htmx: assets::url("htmx.min.js"),
            sse: assets::url("htmx-ext-sse.min.js"),
            script: assets::url("console.js"),
            current,
            who,
            csrf,
        }
    }
}

/// A rendered template as an HTML answer (a template error, which the tests would have
/// caught, becomes the error page).
pub fn render(template: &impl Template) -> Response {
    match template.render() {
        Ok(html) => Html(html).into_response(),
        Err(error) => {
            tracing::error!(%error, "a console template failed to render");
            PageError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "The page could not be shown.",
            )
            .into_response()
        }
    }
}

/// Whether `path` is a page of the console, where a sign-in may lead back to (never
/// another site: no scheme, no `//`).
pub fn is_console_path(path: &str) -> bool {
    (path == "/console" || path.starts_with("/console/") || path.starts_with("/console?"))
        && !path.contains("//")
        && !path.contains('\\')
}

/// A refusal or failure shown as a page of its own, with the API's status and message.
#[derive(Debug)]
pub struct PageError {
    status: StatusCode,
    message: String,
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    layout: Layout,
    status: u16,
    title: &'a str,
    message: &'a str,
}

impl PageError {
    pub fn new(status: StatusCode, message: &str) -> PageError {
        PageError {
            status,
            message: message.to_owned(),
        }
    }

    pub fn forbidden(scope: &str) -> PageError {
        PageError::new(
            StatusCode::FORBIDDEN,
            &format!("Your access does not include this: it needs the `{scope}` scope."),
        )
    }

    pub fn cross_site() -> PageError {
        PageError::new(
            StatusCode::FORBIDDEN,
            "This form did not come from this console's own page (or the page is older \
             than your session). Nothing was changed; open the page again and retry.",
        )
    }

    pub fn bad_form(why: &str) -> PageError {
        PageError::new(
            StatusCode::BAD_REQUEST,
            &format!("The form is not valid: {why}."),
        )
    }
}

impl From<ApiError> for PageError {
    fn from(error: ApiError) -> PageError {
        let status = error.code.status();
        if status.is_server_error() {
            tracing::error!(code = error.code.as_str(), message = %error.message, "console page failed");
        }
        PageError {
            status,
            message: error.message,
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let title = self.status.canonical_reason().unwrap_or("Error");
        let page = ErrorPage {
            layout: Layout::new("", String::new(), String::new()),
            status: self.status.as_u16(),
            title,
            message: &self.message,
        };
        let html = page
            .render()
            .unwrap_or_else(|_| format!("{} {title}", self.status.as_u16()));
        (self.status, Html(html)).into_response()
    }
}

/// How long ago (or how far ahead, for a negative span) `millis` is, as a person says
/// it: `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h`.
pub fn span(millis: i64) -> String {
    let seconds = millis.abs() / 1000;
    match seconds {
        0..=59 => format!("{seconds} s"),
        60..=3599 => format!("{} min", seconds / 60),
        3600..=86_399 => format!("{} h {} min", seconds / 3600, seconds % 3600 / 60),
        _ => format!("{} d {} h", seconds / 86_400, seconds % 86_400 / 3600),
    }
}

/// Dollars as the ledger holds them (to the micro-dollar), with at least cents:
/// `$12.50`, `$0.000125`, never `$0.00` for a spend that is not zero.
/// Takes a reference too, as templates pass one.
pub fn usd(dollars: impl std::borrow::Borrow<f64>) -> String {
    let dollars = *dollars.borrow();
    let micros = format!("{dollars:.6}");
    let trimmed = micros.trim_end_matches('0');
    let decimals = trimmed.len() - trimmed.find('.').map_or(trimmed.len(), |dot| dot + 1);
    match decimals {
        0..=2 => format!("${dollars:.2}"),
        _ => format!("${trimmed}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_keep_their_micros_and_at_least_cents() {
        assert_eq!(usd(0.0), "$0.00");
        assert_eq!(usd(12.5), "$12.50");
        assert_eq!(usd(3.0), "$3.00");
        assert_eq!(usd(0.000125), "$0.000125");
        assert_eq!(usd(1_234.123_4), "$1234.1234");
    }

    #[test]
    fn only_console_paths_are_followed_after_sign_in() {
        assert!(is_console_path("/console"));
        assert!(is_console_path("/console/agents?status=down"));
        for other in [
            "/",
            "//evil.example",
            "/console//x",
            "https://evil.example/console",
            "/consoles",
            "/console/\\x",
        ] {
            assert!(!is_console_path(other), "{other}");
        }
    }

    #[test]
    fn spans_read_as_people_say_them() {
        assert_eq!(span(45_000), "45 s");
        assert_eq!(span(-720_000), "12 min");
        assert_eq!(span(11_100_000), "3 h 5 min");
        assert_eq!(span(187_200_000), "2 d 4 h");
    }
}
