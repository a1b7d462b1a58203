//! Keys in the console: a new key's secret shown once and usable at once, revocation
//! only with its confirmation.

use serde_json::json;

use super::Browser;
use crate::proxy::{simple_chat, MockProvider, TestProxy};

/// The secret on a "new key" page.
fn raw_key(html: &str) -> String {
    let start = html.find("id=\"raw-key\"").expect("a raw key on the page");
    let value = &html[start..];
    let value = &value[value.find("value=\"").unwrap() + "value=\"".len()..];
    value[..value.find('"').unwrap()].to_owned()
}

db_test!(
    a_proxy_key_made_in_the_console_works_at_once_and_revoking_it_asks_first,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let tenant = app.new_tenant("starter").await;
        let mut browser = Browser::new(&app);
        browser.sign_in_with_key(&tenant.admin_key).await;
        let page = browser.get("/console/keys").await;
        assert_eq!(page.status, 200);

        let created = browser
            .post(
                "/console/keys/proxy",
                &[
                    ("csrf", &page.csrf()),
                    ("developer_label", "summariser"),
                    ("allowed_providers", "openai"),
                    ("allowed_models", ""),
                ],
            )
            .await;
        assert_eq!(created.status, 201, "{}", created.body);
        assert!(created.body.contains("in force on every connected proxy"));
        let key = raw_key(&created.body);
        assert!(key.starts_with("wdn_"), "{key}");
        let answer = proxy.chat(&key, simple_chat("gpt-4o-mini")).await;
        assert_eq!(
            answer.status(),
            200,
            "the proxy knows the key when the page answers"
        );

        // Listed without its secret.
        let listed = browser.get("/console/keys").await;
        assert!(listed.body.contains("summariser"));
        assert!(!listed.body.contains(&key));
        let id_at =
            listed.body.find("/console/keys/proxy/").unwrap() + "/console/keys/proxy/".len();
        let id = listed.body[id_at..id_at + listed.body[id_at..].find('/').unwrap()].to_owned();

        let unconfirmed = browser
            .post(
                &format!("/console/keys/proxy/{id}/revoke"),
                &[("csrf", &listed.csrf())],
            )
            .await;
        assert_eq!(unconfirmed.status, 400);
        assert_eq!(
            proxy.chat(&key, simple_chat("gpt-4o-mini")).await.status(),
            200
        );
        let revoked = browser
            .post(
                &format!("/console/keys/proxy/{id}/revoke"),
                &[("csrf", &listed.csrf()), ("confirm", "yes")],
            )
            .await;
        assert_eq!(revoked.status, 303, "{}", revoked.body);
        assert_eq!(
            proxy.chat(&key, simple_chat("gpt-4o-mini")).await.status(),
            401
        );
        let after = browser.get(revoked.location()).await;
        assert!(
            after.body.contains(&format!("Key {id} revoked.")),
            "{}",
            after.body
        );
        assert!(after.body.contains("in force on every connected proxy"));
    }
);

db_test!(
    an_api_key_made_in_the_console_has_the_access_chosen,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let mut browser = Browser::new(&app);
        browser.sign_in_with_key(&tenant.admin_key).await;
        let page = browser.get("/console/keys").await;
        let bad = browser
            .post(
                "/console/keys/api",
                &[
                    ("csrf", &page.csrf()),
                    ("name", "dashboard"),
                    ("key_type", "superuser"),
                ],
            )
            .await;
        assert_eq!(bad.status, 400, "{}", bad.body);
        let created = browser
            .post(
                "/console/keys/api",
                &[
                    ("csrf", &page.csrf()),
                    ("name", "dashboard"),
                    ("key_type", "read_only"),
                    ("expires_in_days", "30"),
                ],
            )
            .await;
        assert_eq!(created.status, 201, "{}", created.body);
        let key = raw_key(&created.body);
        let me = crate::helpers::expect_status(app.get("/auth/me", &key).await, 200).await;
        let scopes = me["data"]["scopes"].as_array().unwrap();
        assert!(scopes.contains(&json!("registry:read")), "{me}");
        assert!(!scopes.contains(&json!("admin")), "{me}");
        assert_eq!(
            app.post("/teams", &key, json!({ "name": "ops" }))
                .await
                .status(),
            403
        );
    }
);
