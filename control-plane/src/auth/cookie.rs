//! Browser cookies: reading one from a request, writing one as every Warden cookie is
//! written (HttpOnly, path `/`, `Secure` over https), and telling whether the browser
//! reached Warden over https.

use axum::http::header::{COOKIE, SET_COOKIE};
use axum::http::{HeaderMap, HeaderName, HeaderValue};

/// How a cookie travels with requests from other sites.
#[derive(Debug, Clone, Copy)]
pub enum SameSite {
    /// Never (the console's session).
    Strict,
    /// Only on top-level navigations (the SSO hand-off, which arrives from the IdP).
    Lax,
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

/// Whether the browser reached Warden over https (TLS ends at a load balancer in front
/// of the control plane, which says so in `X-Forwarded-Proto`): cookies are then marked
/// `Secure`. Trusting the header can only add that attribute.
pub fn over_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|value| value.to_str().ok())
        .is_some_and(|proto| proto.eq_ignore_ascii_case("https"))
}

/// A `Set-Cookie` for `name`: HttpOnly, path `/`, for `max_age` seconds (0 deletes it),
/// `Secure` when the request came over https.
pub fn set_cookie(
    request: &HeaderMap,
    name: &str,
    value: &str,
    max_age: i64,
    same_site: SameSite,
) -> (HeaderName, HeaderValue) {
    let secure = if over_https(request) { "; Secure" } else { "" };
    let same_site = match same_site {
        SameSite::Strict => "Strict",
        SameSite::Lax => "Lax",
    };
    let cookie = format!(
        "{name}={value}; Path=/; HttpOnly; SameSite={same_site}; Max-Age={max_age}{secure}"
    );
    // Values are tokens of ASCII letters, digits, `_` and `.`: always a valid header.
    let value = HeaderValue::from_str(&cookie).unwrap_or(HeaderValue::from_static(""));
    (SET_COOKIE, value)
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
    fn cookies_are_secure_behind_https() {
        let mut request = HeaderMap::new();
        let (_, plain) = set_cookie(&request, "a", "b", 60, SameSite::Strict);
        assert_eq!(plain, "a=b; Path=/; HttpOnly; SameSite=Strict; Max-Age=60");
        request.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        let (_, secure) = set_cookie(&request, "a", "", 0, SameSite::Lax);
        assert_eq!(
            secure,
            "a=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0; Secure"
        );
    }
}
