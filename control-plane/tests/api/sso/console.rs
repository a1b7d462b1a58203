//! A console sign-in through the IdP ends in the console, signed in; the same IdP answer
//! carried into a browser that did not start the login (login CSRF) signs nobody in.

use serde_json::json;

use super::{sso_tenant, Idp, IDP_SSO_URL};
use crate::console::Browser;

/// The IdP URL of the page that moves the browser on (its meta refresh), unescaped.
fn onward(html: &str) -> String {
    let start = html.find("content=\"0;url=").expect("a meta refresh") + "content=\"0;url=".len();
    let url = &html[start..start + html[start..].find('"').unwrap()];
    url.replace("&#38;", "&")
        .replace("&amp;", "&")
        .replace("&#43;", "+")
        .replace("&#61;", "=")
        .replace("&#47;", "/")
}

/// The RelayState the login was started with, from the IdP URL.
fn relay_state(url: &str) -> String {
    let query = url.split_once('?').unwrap().1;
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(name, _)| name == "RelayState")
        .map(|(_, value)| value.into_owned())
        .expect("a RelayState")
}

db_test!(
    a_console_login_through_the_idp_ends_signed_in_in_the_console,
    |app| {
        let idp = Idp::start();
        let tenant = sso_tenant(&app, &idp).await;
        let mut browser = Browser::new(&app);
        let page = browser
            .get(&format!("/console/sso?organisation={}", tenant.id))
            .await;
        assert_eq!(page.status, 200, "{}", page.body);
        let url = onward(&page.body);
        assert!(url.starts_with(IDP_SSO_URL), "{url}");
        let relay = relay_state(&url);
        assert!(relay.starts_with("console:"), "{relay}");
        let answer = idp.respond(&url, "ana@corp.example", "valid", json!({}));
        let acs = format!("/api/v1/sso/{}/saml/acs", tenant.id);

        // Login CSRF: another site makes a victim's browser post the answer. The victim's
        // browser never started the login, so the hand-off is refused and the session ended.
        let mut victim = Browser::new(&app);
        let posted = victim
            .post_from(
                "https://idp.example.com",
                &acs,
                &[("SAMLResponse", &answer), ("RelayState", &relay)],
            )
            .await;
        assert_eq!(posted.status, 200, "{}", posted.body);
        let stolen = victim.cookies["warden_sso_handoff"].clone();
        let refused = victim.get("/console/sso/finish").await;
        assert_eq!(refused.status, 403, "{}", refused.body);
        assert!(!victim.has_session());
        let token = stolen.rsplit_once('.').unwrap().0;
        assert_eq!(
            app.get("/auth/me", token).await.status(),
            401,
            "the session was ended"
        );

        // The browser that started it signs in (with a fresh answer: each is used once).
        let page = browser
            .get(&format!("/console/sso?organisation={}", tenant.id))
            .await;
        let url = onward(&page.body);
        let answer = idp.respond(&url, "ana@corp.example", "valid", json!({}));
        let posted = browser
            .post_from(
                "https://idp.example.com",
                &acs,
                &[
                    ("SAMLResponse", &answer),
                    ("RelayState", &relay_state(&url)),
                ],
            )
            .await;
        assert_eq!(posted.status, 200, "{}", posted.body);
        assert!(posted.body.contains("url=/console/sso/finish"));
        let finished = browser.get("/console/sso/finish").await;
        assert_eq!(finished.status, 303, "{}", finished.body);
        assert_eq!(finished.location(), "/console");
        assert!(browser.has_session());
        assert!(!browser.cookies.contains_key("warden_sso_handoff"));
        let overview = browser.get("/console").await;
        assert_eq!(overview.status, 200);
        assert!(overview.body.contains("ana@corp.example"));

        // A login the API started (no console RelayState) still answers JSON.
        let api_login = crate::sso::start_login(&app, &tenant.id, "dashboard").await;
        let answer = idp.respond(&api_login, "ana@corp.example", "valid", json!({}));
        let json_answer = crate::sso::post_acs(&app, &tenant.id, &answer).await;
        assert_eq!(json_answer.status(), 200);
        let body: serde_json::Value = json_answer.json().await.unwrap();
        assert!(body["data"]["access_token"].is_string(), "{body}");
    }
);
