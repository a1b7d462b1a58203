//! Signup, login, sessions, `/auth/me`, API keys and the granting rules.

use reqwest::Method;
use serde_json::json;

use crate::helpers::{expect_error, expect_status, now_ms, TestApp};

fn unique_email() -> String {
    format!(
        "{}@example.com",
        warden_shared::ids::new_id(warden_shared::ids::IdKind::User, now_ms()).to_lowercase()
    )
}

async fn signup(app: &TestApp, email: &str) -> reqwest::Response {
    app.request(Method::POST, "/auth/signup", None)
        .json(
            &json!({ "email": email, "password": "correct horse battery", "company_name": "Acme" }),
        )
        .send()
        .await
        .unwrap()
}

async fn login(app: &TestApp, email: &str, password: &str) -> reqwest::Response {
    app.request(Method::POST, "/auth/login", None)
        .json(&json!({ "email": email, "password": password }))
        .send()
        .await
        .unwrap()
}

db_test!(
    signup_creates_a_free_tenant_whose_key_and_login_work,
    |app| {
        let email = unique_email();
        let body = expect_status(signup(&app, &email).await, 201).await;
        let data = &body["data"];
        let key = data["api_key"].as_str().unwrap();
        assert!(key.starts_with("wdn_"));
        assert!(data["user_id"].as_str().unwrap().starts_with("usr_"));
        assert!(data["message"].is_string());
        let tenant_id = data["tenant_id"].as_str().unwrap();

        let me = expect_status(app.get("/auth/me", key).await, 200).await;
        assert_eq!(me["data"]["tenant_id"], json!(tenant_id));
        assert_eq!(me["data"]["scopes"], json!(["admin"]));

        let tenant = expect_status(
            app.get(
                &format!("/admin/tenants/{tenant_id}"),
                crate::helpers::platform_key(),
            )
            .await,
            200,
        )
        .await;
        assert_eq!(tenant["data"]["plan"], json!("free"));

        let session = expect_status(
            login(&app, &email.to_uppercase(), "correct horse battery").await,
            200,
        )
        .await;
        assert_eq!(session["data"]["token_type"], json!("bearer"));
        assert_eq!(session["data"]["expires_in"], json!(3600));
        assert_eq!(session["data"]["tenant_id"], json!(tenant_id));
        let token = session["data"]["access_token"].as_str().unwrap();
        assert!(token.starts_with("wdn_sess_"));
        let me = expect_status(app.get("/auth/me", token).await, 200).await;
        assert_eq!(me["data"]["scopes"], json!(["admin"]));
        // The session carries the user's scopes on the management API.
        expect_status(
            app.post("/teams", token, json!({ "name": "from-session" }))
                .await,
            201,
        )
        .await;

        // Sessions last one hour.
        app.clock.advance(3_600_000);
        expect_error(app.get("/auth/me", token).await, 401, "expired_credentials").await;
        expect_status(app.get("/auth/me", key).await, 200).await;
    }
);

db_test!(
    signup_with_a_taken_email_conflicts_and_writes_nothing,
    |app| {
        let email = unique_email();
        expect_status(signup(&app, &email).await, 201).await;
        let tables_before = app.tables().await.len();
        let tenants_before: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tenants")
            .fetch_one(app.db.pool())
            .await
            .unwrap();
        expect_error(signup(&app, &email).await, 409, "email_taken").await;
        let tenants_after: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tenants")
            .fetch_one(app.db.pool())
            .await
            .unwrap();
        assert_eq!(tenants_before, tenants_after);
        assert_eq!(tables_before, app.tables().await.len());
    }
);

db_test!(
    failed_logins_do_not_reveal_whether_the_email_exists,
    |app| {
        let email = unique_email();
        expect_status(signup(&app, &email).await, 201).await;
        let wrong_password = expect_error(
            login(&app, &email, "not the password").await,
            401,
            "invalid_login",
        )
        .await;
        let unknown_email = expect_error(
            login(&app, &unique_email(), "not the password").await,
            401,
            "invalid_login",
        )
        .await;
        assert_eq!(wrong_password, unknown_email);
    }
);

db_test!(
    login_and_signup_are_throttled_with_retry_after,
    |config| {
        config.auth.login_attempts_per_email = 3;
        config.auth.signups_per_ip = 2;
    },
    |app| {
        let email = unique_email();
        expect_status(signup(&app, &email).await, 201).await;
        for _ in 0..3 {
            expect_error(
                login(&app, &email, "wrong password!").await,
                401,
                "invalid_login",
            )
            .await;
        }
        let response = login(&app, &email, "correct horse battery").await;
        let retry_after: u64 = response.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(retry_after > 0);
        expect_error(response, 429, "rate_limited").await;

        expect_status(signup(&app, &unique_email()).await, 201).await;
        let response = signup(&app, &unique_email()).await;
        assert!(response.headers().contains_key("retry-after"));
        expect_error(response, 429, "rate_limited").await;

        // The window ends, and so does the throttle.
        app.clock.advance(16 * 60 * 1000);
        expect_status(login(&app, &email, "correct horse battery").await, 200).await;
    }
);

db_test!(
    api_keys_are_shown_once_stored_hashed_and_listed_without_secrets,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let created = expect_status(
            app.post(
                "/auth/api-keys",
                &tenant.admin_key,
                json!({ "name": "ci", "scopes": ["registry:read"], "expires_in_days": 30 }),
            )
            .await,
            201,
        )
        .await;
        let data = &created["data"];
        let raw = data["raw_key"].as_str().unwrap();
        assert!(raw.starts_with("wdn_"));
        assert!(raw.starts_with(data["key_prefix"].as_str().unwrap()));
        assert_eq!(data["scopes"], json!(["registry:read"]));
        assert!(data["expires_at"].is_string());

        let listed = expect_status(app.get("/auth/api-keys", &tenant.admin_key).await, 200).await;
        assert_eq!(listed["meta"]["total"], json!(2));
        assert!(!listed.to_string().contains(raw));
        assert!(listed["data"][0].get("raw_key").is_none());

        let stored: Vec<String> =
            sqlx::query_scalar("SELECT key_hash FROM api_keys WHERE tenant_id = $1")
                .bind(&tenant.id)
                .fetch_all(app.db.pool())
                .await
                .unwrap();
        assert!(stored.iter().all(|hash| hash.len() == 64 && hash != raw));

        let me = expect_status(app.get("/auth/me", raw).await, 200).await;
        assert_eq!(me["data"]["key_id"], data["id"]);
    }
);

db_test!(key_types_expand_to_their_scope_sets, |app| {
    let tenant = app.new_tenant("starter").await;
    let proxy = expect_status(
        app.post(
            "/auth/api-keys",
            &tenant.admin_key,
            json!({ "name": "p", "key_type": "proxy" }),
        )
        .await,
        201,
    )
    .await;
    assert_eq!(
        proxy["data"]["scopes"],
        json!(["registry:read", "proxy:forward"])
    );
    let read_only = expect_status(
        app.post(
            "/auth/api-keys",
            &tenant.admin_key,
            json!({ "name": "r", "key_type": "read_only" }),
        )
        .await,
        201,
    )
    .await;
    let key = read_only["data"]["raw_key"].as_str().unwrap();
    expect_status(app.get("/agents", key).await, 200).await;
    expect_error(
        app.post("/agents", key, json!({ "name": "x" })).await,
        403,
        "insufficient_scope",
    )
    .await;
    expect_error(
        app.post(
            "/auth/api-keys",
            &tenant.admin_key,
            json!({ "name": "none" }),
        )
        .await,
        422,
        "validation_failed",
    )
    .await;
});

db_test!(granting_follows_the_rules_of_spec_5_5, |app| {
    let tenant = app.new_tenant("starter").await;
    let reader = app
        .key_with_scopes(&tenant, &["registry:read", "cost:read"])
        .await;
    let body = expect_error(
        app.post(
            "/auth/api-keys",
            &reader,
            json!({ "name": "x", "scopes": ["registry:write"] }),
        )
        .await,
        403,
        "scope_not_grantable",
    )
    .await;
    assert_eq!(
        body["error"]["details"]["scopes"],
        json!(["registry:write"])
    );
    expect_status(
        app.post(
            "/auth/api-keys",
            &reader,
            json!({ "name": "x", "scopes": ["cost:read"] }),
        )
        .await,
        201,
    )
    .await;
    expect_error(
        app.post(
            "/auth/api-keys",
            &tenant.admin_key,
            json!({ "name": "x", "scopes": ["platform:admin"] }),
        )
        .await,
        403,
        "scope_not_grantable",
    )
    .await;
    expect_status(
        app.post(
            "/auth/api-keys",
            &tenant.admin_key,
            json!({ "name": "x", "scopes": ["payload:write", "admin"] }),
        )
        .await,
        201,
    )
    .await;
    // A narrow key cannot revoke a wider one.
    let me = expect_status(app.get("/auth/me", &tenant.admin_key).await, 200).await;
    let admin_key_id = me["data"]["key_id"].as_str().unwrap();
    expect_error(
        app.delete(&format!("/auth/api-keys/{admin_key_id}"), &reader)
            .await,
        403,
        "scope_not_grantable",
    )
    .await;
});

db_test!(
    deleted_and_expired_keys_stop_working_and_are_audited,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let created = expect_status(
            app.post(
                "/auth/api-keys",
                &tenant.admin_key,
                json!({ "name": "short", "scopes": ["registry:read"], "expires_in_days": 1 }),
            )
            .await,
            201,
        )
        .await;
        let short = created["data"]["raw_key"].as_str().unwrap().to_owned();
        expect_status(app.get("/agents", &short).await, 200).await;
        app.clock.advance(86_400_000);
        expect_error(app.get("/agents", &short).await, 401, "expired_credentials").await;

        let other = expect_status(
            app.post(
                "/auth/api-keys",
                &tenant.admin_key,
                json!({ "name": "doomed", "scopes": ["registry:read"] }),
            )
            .await,
            201,
        )
        .await;
        let id = other["data"]["id"].as_str().unwrap();
        let raw = other["data"]["raw_key"].as_str().unwrap();
        expect_status(
            app.delete(&format!("/auth/api-keys/{id}"), &tenant.admin_key)
                .await,
            204,
        )
        .await;
        expect_error(app.get("/agents", raw).await, 401, "invalid_credentials").await;
        expect_error(
            app.delete(&format!("/auth/api-keys/{id}"), &tenant.admin_key)
                .await,
            404,
            "not_found",
        )
        .await;

        let events = app.audit_events(&tenant.id, id).await;
        assert_eq!(events, ["api_key.created", "api_key.deleted"]);
    }
);

db_test!(missing_and_malformed_credentials_are_401, |app| {
    let response = app
        .request(Method::GET, "/agents", None)
        .send()
        .await
        .unwrap();
    expect_error(response, 401, "missing_credentials").await;
    for bad in ["wdn_notakey", "sk-abc", "wdn_sess_nosuchsession"] {
        expect_error(app.get("/agents", bad).await, 401, "invalid_credentials").await;
    }
    let response = app
        .request(Method::GET, "/agents", None)
        .header("authorization", "Basic dXNlcjpwYXNz")
        .send()
        .await
        .unwrap();
    expect_error(response, 401, "invalid_credentials").await;
});

/// On SQLite a login's session is written in its turn among the writers
/// (`Db::begin_write`), not by a statement of its own that meets the write lock held
/// and sleeps in SQLite's busy handler (which serves a steady queue of writers by
/// polling, not in order). With the busy handler off, a login that met the lock held
/// would fail at once; here it waits for the writer ahead of it and succeeds.
#[tokio::test]
async fn a_login_waits_its_turn_among_sqlite_writers() {
    let app = TestApp::spawn_with(crate::helpers::Backend::Sqlite, |_| {}).await;
    let email = unique_email();
    expect_status(signup(&app, &email).await, 201).await;
    crate::helpers::without_busy_handler(&app).await;

    let ahead = app.db.begin_write().await.unwrap();
    let (answer, ()) = tokio::join!(login(&app, &email, "correct horse battery"), async {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        ahead.commit().await.unwrap();
    });
    let session = expect_status(answer, 200).await;
    let token = session["data"]["access_token"].as_str().unwrap();
    expect_status(app.get("/auth/me", token).await, 200).await;
}
