//! Getting in and out of the console, and what every answer carries.

use serde_json::json;

use super::Browser;
use crate::helpers::{expect_status, TestApp};

const PASSWORD: &str = "a-long-password";

/// Signs up through the API: a tenant whose owner has a password.
async fn owner(app: &TestApp) -> (String, String) {
    let email = format!(
        "{}@example.com",
        warden_shared::ids::new_id(warden_shared::ids::IdKind::User, crate::helpers::now_ms())
            .to_lowercase()
    );
    let body = json!({ "email": email, "password": PASSWORD, "company_name": "Acme" });
    let created = expect_status(
        app.client
            .post(format!("{}/auth/signup", app.api))
            .json(&body)
            .send()
            .await
            .unwrap(),
        201,
    )
    .await;
    (
        email,
        created["data"]["api_key"].as_str().unwrap().to_owned(),
    )
}

db_test!(signing_in_with_a_password_and_out_again, |app| {
    let (email, _) = owner(&app).await;
    let mut browser = Browser::new(&app);
    // The root and every page lead a stranger to the sign-in page, and back afterwards.
    assert_eq!(browser.get("/").await.location(), "/console");
    let away = browser.get("/console/agents?status=down").await;
    assert_eq!(away.status, 303);
    assert_eq!(
        away.location(),
        "/console/sign-in?next=%2Fconsole%2Fagents%3Fstatus%3Ddown"
    );

    // A part of a page (htmx's refresh of the queue) is told to move the whole page.
    let partial = app
        .client
        .get(format!("{}/console/approvals/queue", app.base))
        .header("hx-request", "true")
        .header(
            "hx-current-url",
            format!("{}/console/approvals?status=denied", app.base),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(partial.status(), 401);
    assert_eq!(
        partial.headers()["hx-redirect"],
        "/console/sign-in?next=%2Fconsole%2Fapprovals%3Fstatus%3Ddenied"
    );

    let form = browser.get("/console/sign-in").await;
    assert_eq!(form.status, 200);
    let wrong = browser
        .post(
            "/console/sign-in",
            &[
                ("email", &email),
                ("password", "not-the-password"),
                ("csrf", &form.csrf()),
            ],
        )
        .await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.body.contains("The email or the password is wrong."));
    assert!(!browser.has_session());

    let signed = browser
        .post(
            "/console/sign-in",
            &[
                ("email", &email),
                ("password", PASSWORD),
                ("csrf", &wrong.csrf()),
                ("next", "/console/agents?status=down"),
            ],
        )
        .await;
    assert_eq!(signed.status, 303, "{}", signed.body);
    assert_eq!(signed.location(), "/console/agents?status=down");
    let overview = browser.get("/console").await;
    assert_eq!(overview.status, 200);
    assert!(overview.body.contains(&email), "signed in as the owner");
    assert!(overview.body.contains("Agents by status"));

    // Signing out ends the session on the server: its token no longer opens anything,
    // cookie or bearer.
    let token = browser.cookies["warden_session"].clone();
    let out = browser
        .post("/console/sign-out", &[("csrf", &overview.csrf())])
        .await;
    assert_eq!(out.location(), "/console/sign-in");
    assert!(!browser.has_session());
    let me = app.get("/auth/me", &token).await;
    assert_eq!(me.status(), 401);
    browser.cookies.insert("warden_session".into(), token);
    assert_eq!(browser.get("/console").await.status, 303);
});

db_test!(a_sign_in_leads_back_only_to_the_console, |app| {
    let (email, _) = owner(&app).await;
    let mut browser = Browser::new(&app);
    let form = browser.get("/console/sign-in").await;
    let signed = browser
        .post(
            "/console/sign-in",
            &[
                ("email", &email),
                ("password", PASSWORD),
                ("csrf", &form.csrf()),
                ("next", "//evil.example/console"),
            ],
        )
        .await;
    assert_eq!(signed.location(), "/console");
});

db_test!(
    signing_up_creates_a_tenant_shows_its_key_once_and_signs_in,
    |app| {
        let mut browser = Browser::new(&app);
        let form = browser.get("/console/sign-up").await;
        let short = browser
            .post(
                "/console/sign-up",
                &[
                    ("company_name", "Initech"),
                    ("email", "owner@initech.example"),
                    ("password", "short"),
                    ("csrf", &form.csrf()),
                ],
            )
            .await;
        assert_eq!(short.status, 422);
        assert!(short
            .body
            .contains("The password must be 10 to 256 characters long."));
        let created = browser
            .post(
                "/console/sign-up",
                &[
                    ("company_name", "Initech"),
                    ("email", "owner@initech.example"),
                    ("password", PASSWORD),
                    ("csrf", &short.csrf()),
                ],
            )
            .await;
        assert_eq!(created.status, 201, "{}", created.body);
        let start = created.body.find("value=\"wdn_").unwrap() + "value=\"".len();
        let key = &created.body[start..start + created.body[start..].find('"').unwrap()];
        expect_status(app.get("/auth/me", key).await, 200).await;
        assert_eq!(browser.get("/console").await.status, 200);
        // The same email again: the API's refusal, shown on the form.
        let mut other = Browser::new(&app);
        let form = other.get("/console/sign-up").await;
        let taken = other
            .post(
                "/console/sign-up",
                &[
                    ("company_name", "Initech"),
                    ("email", "owner@initech.example"),
                    ("password", PASSWORD),
                    ("csrf", &form.csrf()),
                ],
            )
            .await;
        assert_eq!(taken.status, 409);
    }
);

db_test!(
    signing_in_with_an_api_key_acts_as_the_key_until_it_goes,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let viewer = app.key_with_scopes(&tenant, &["registry:read"]).await;
        let mut browser = Browser::new(&app);
        let form = browser.get("/console/sign-in").await;
        let refused = browser
            .post(
                "/console/sign-in/key",
                &[("api_key", "wdn_not-a-key"), ("csrf", &form.csrf())],
            )
            .await;
        assert_eq!(refused.status, 401);
        assert!(!browser.has_session());
        browser.sign_in_with_key(&viewer).await;
        let agents = browser.get("/console/agents").await;
        assert_eq!(agents.status, 200);
        // Pages beyond the key's scopes are refused as the API refuses them.
        let approvals = browser.get("/console/approvals").await;
        assert_eq!(approvals.status, 403);
        assert!(approvals.body.contains("governance:read"));
        // Deleting the key ends its console sessions.
        let listed = expect_status(app.get("/auth/api-keys", &tenant.admin_key).await, 200).await;
        let id = listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|key| key["scopes"] == json!(["registry:read"]))
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        expect_status(
            app.delete(&format!("/auth/api-keys/{id}"), &tenant.admin_key)
                .await,
            204,
        )
        .await;
        assert_eq!(browser.get("/console/agents").await.status, 303);
    }
);

db_test!(
    every_answer_forbids_inline_script_frames_and_shared_caching,
    |app| {
        let mut browser = Browser::new(&app);
        let page = browser.get("/console/sign-in").await;
        let header = |name: &str| page.headers[name].to_str().unwrap().to_owned();
        let policy = header("content-security-policy");
        assert!(policy.contains("script-src 'self'"), "{policy}");
        assert!(!policy.contains("unsafe-inline"), "{policy}");
        assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
        assert_eq!(header("x-frame-options"), "DENY");
        assert_eq!(header("cache-control"), "no-store");
        assert!(!page.body.contains("<script>"), "no inline script");
        assert!(!page.body.contains(" style="), "no inline style");
        // Assets are named by their content and cached for good; others are not found.
        let css = page
            .body
            .split('"')
            .find(|part| part.starts_with("/console/assets/console."))
            .unwrap()
            .to_owned();
        let asset = browser.get(&css).await;
        assert_eq!(asset.status, 200);
        assert_eq!(
            asset.headers["cache-control"],
            "public, max-age=31536000, immutable"
        );
        assert!(asset.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/css"));
        assert_eq!(browser.get("/console/assets/console.css").await.status, 404);
    }
);
