//! The channel resource: masking, the secret shown once, the fixed type, validation that
//! changes nothing, tenant isolation, scopes, the limit, the test send, and the outbox
//! rows written by the changes that raise events.

use serde_json::{json, Value};

use super::{create_channel, notifying_app, Receiver, ROUTING_KEY};
use crate::console::Browser;
use crate::helpers::{expect_error, expect_status, report_decisions, Backend, TestApp};

async fn channel(app: &TestApp, key: &str, id: &str) -> Value {
    expect_status(
        app.get(&format!("/notifications/channels/{id}"), key).await,
        200,
    )
    .await["data"]
        .clone()
}

db_test!(
    sensitive_config_is_masked_and_the_signing_secret_shown_once,
    |config| {
        config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()];
    },
    |app| {
        let tenant = app.new_tenant("free").await;
        let key = &tenant.admin_key;
        let hook = create_channel(
            &app,
            &tenant,
            json!({"name": "siem", "channel_type": "webhook", "events": ["agent.blocked"],
               "config": {"url": "http://127.0.0.1:9/hooks/s3cr3t-token"}}),
        )
        .await;
        let secret = hook["signing_secret"].as_str().unwrap();
        assert!(secret.starts_with("whsec_"), "{secret}");
        assert_eq!(hook["config"]["url"], "http://127.0.0.1/****");
        assert_eq!(hook["enabled"], true);
        let id = hook["id"].as_str().unwrap();
        let read = channel(&app, key, id).await;
        assert!(read.get("signing_secret").is_none(), "{read}");
        assert_eq!(read["config"]["url"], "http://127.0.0.1/****");

        let pd = create_channel(
            &app,
            &tenant,
            json!({"name": "on-call", "channel_type": "pagerduty", "events": ["budget.exceeded"],
               "config": {"routing_key": ROUTING_KEY, "events_url": "http://127.0.0.1:9/pd"}}),
        )
        .await;
        assert_eq!(pd["config"]["routing_key"], "****ijkl");
        assert!(pd.get("signing_secret").is_none());
        let list = expect_status(app.get("/notifications/channels", key).await, 200).await;
        assert_eq!(list["meta"]["total"], 2);
        let text = list.to_string();
        assert!(!text.contains("s3cr3t") && !text.contains(ROUTING_KEY) && !text.contains(secret));

        // PATCHing back what was read keeps the secrets; a new name changes only the name.
        let pd_id = pd["id"].as_str().unwrap();
        let response = app
            .patch(
                &format!("/notifications/channels/{pd_id}"),
                key,
                json!({ "name": "primary on-call", "config": pd["config"] }),
            )
            .await;
        let patched = expect_status(response, 200).await["data"].clone();
        assert_eq!(patched["name"], "primary on-call");
        let stored: String =
            sqlx::query_scalar("SELECT config FROM notification_channels WHERE id = $1")
                .bind(pd_id)
                .fetch_one(app.db.pool())
                .await
                .unwrap();
        assert!(stored.contains(ROUTING_KEY), "{stored}");
        // The audit trail names the channel, never its config.
        let trail = app.audit_events(&tenant.id, pd_id).await;
        assert_eq!(trail.len(), 2, "{trail:?}");
        let details: Vec<String> = sqlx::query_scalar(
        "SELECT details FROM audit_events WHERE tenant_id = $1 AND target_type = 'notification_channel'",
    )
    .bind(&tenant.id)
    .fetch_all(app.db.pool())
    .await
    .unwrap();
        assert!(details
            .iter()
            .all(|d| !d.contains(ROUTING_KEY) && !d.contains("s3cr3t")));
    }
);

db_test!(
    bad_channels_are_refused_and_change_nothing,
    |config| {
        config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()];
    },
    |app| {
        let tenant = app.new_tenant("free").await;
        let key = &tenant.admin_key;
        let cases = [
            (
                json!({"name": "x", "channel_type": "sms", "events": ["agent.blocked"], "config": {}}),
                "channel_type",
            ),
            (
                json!({"name": "x", "channel_type": "slack", "events": [], "config": {"webhook_url": "http://127.0.0.1:9/"}}),
                "events",
            ),
            (
                json!({"name": "x", "channel_type": "slack", "events": ["agent.exploded"], "config": {"webhook_url": "http://127.0.0.1:9/"}}),
                "events[0]",
            ),
            (
                json!({"name": "x", "channel_type": "slack", "events": ["agent.blocked"], "config": {}}),
                "config",
            ),
            (
                json!({"name": "x", "channel_type": "slack", "events": ["agent.blocked"], "config": {"webhook_url": "http://127.0.0.1:9/", "extra": 1}}),
                "config",
            ),
            (
                json!({"name": "x", "channel_type": "pagerduty", "events": ["agent.blocked"], "config": {"routing_key": ""}}),
                "config.routing_key",
            ),
            (
                json!({"name": "x", "channel_type": "email", "events": ["agent.blocked"], "config": {"to": ["nobody"], "from": "a@b.io", "smtp_host": "127.0.0.1"}}),
                "config.to[0]",
            ),
            (
                json!({"name": "", "channel_type": "slack", "events": ["agent.blocked"], "config": {"webhook_url": "http://127.0.0.1:9/"}}),
                "name",
            ),
        ];
        for (body, field) in cases {
            let error = expect_error(
                app.post("/notifications/channels", key, body.clone()).await,
                422,
                "validation_failed",
            )
            .await;
            assert!(
                error["error"]["details"]["field"]
                    .as_str()
                    .unwrap()
                    .starts_with(field),
                "{body}: {error}"
            );
        }
        assert_eq!(app.count_rows("notification_channels", &tenant.id).await, 0);

        let slack = create_channel(
            &app,
            &tenant,
            json!({"name": "ops", "channel_type": "slack", "events": ["agent.blocked"],
               "config": {"webhook_url": "http://127.0.0.1:9/a"}}),
        )
        .await;
        let id = slack["id"].as_str().unwrap();
        let path = format!("/notifications/channels/{id}");
        let before = channel(&app, key, id).await;
        for (body, field) in [
            (json!({"channel_type": "webhook"}), "channel_type"),
            (json!({"events": ["nope"]}), "events[0]"),
            (
                json!({"name": "renamed", "config": {"webhook_url": "gopher://x/"}}),
                "config.webhook_url",
            ),
            (json!({"config": {"webhook_url": null}}), "config"),
        ] {
            let response = app.patch(&path, key, body.clone()).await;
            assert_eq!(response.status().as_u16(), 422, "{body}");
            let error: Value = response.json().await.unwrap();
            assert!(
                error["error"]["details"]["field"]
                    .as_str()
                    .unwrap()
                    .starts_with(field),
                "{error}"
            );
        }
        assert_eq!(channel(&app, key, id).await, before);
        let trail = app.audit_events(&tenant.id, id).await;
        assert_eq!(trail.len(), 1, "only the creation: {trail:?}");

        // Disabling and re-subscribing work; deleting ends it.
        let response = app
            .patch(
                &path,
                key,
                json!({"enabled": false, "events": ["policy.violated", "agent.blocked"]}),
            )
            .await;
        let patched = expect_status(response, 200).await["data"].clone();
        assert_eq!(patched["enabled"], false);
        assert_eq!(
            patched["events"],
            json!(["agent.blocked", "policy.violated"])
        );
        assert_eq!(app.delete(&path, key).await.status().as_u16(), 204);
        expect_error(app.get(&path, key).await, 404, "not_found").await;
        expect_error(app.delete(&path, key).await, 404, "not_found").await;
        expect_error(
            app.get("/notifications/channels/null", key).await,
            404,
            "not_found",
        )
        .await;
    }
);

db_test!(
    channels_are_the_tenants_own_and_need_admin,
    |config| {
        config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()];
    },
    |app| {
        let tenant = app.new_tenant("free").await;
        let other = app.new_tenant("free").await;
        let slack = create_channel(
            &app,
            &tenant,
            json!({"name": "ops", "channel_type": "slack", "events": ["agent.blocked"],
               "config": {"webhook_url": "http://127.0.0.1:9/a"}}),
        )
        .await;
        let path = format!("/notifications/channels/{}", slack["id"].as_str().unwrap());
        expect_error(app.get(&path, &other.admin_key).await, 404, "not_found").await;
        expect_error(
            app.patch(&path, &other.admin_key, json!({"name": "mine"}))
                .await,
            404,
            "not_found",
        )
        .await;
        expect_error(app.delete(&path, &other.admin_key).await, 404, "not_found").await;
        let test = format!("{path}/test");
        expect_error(
            app.post(&test, &other.admin_key, json!({})).await,
            404,
            "not_found",
        )
        .await;
        let listed = expect_status(
            app.get("/notifications/channels", &other.admin_key).await,
            200,
        )
        .await;
        assert_eq!(listed["meta"]["total"], 0);

        let reader = app
            .key_with_scopes(&tenant, &["registry:read", "governance:read"])
            .await;
        expect_error(
            app.get("/notifications/channels", &reader).await,
            403,
            "insufficient_scope",
        )
        .await;
        expect_error(
            app.post(&test, &reader, json!({})).await,
            403,
            "insufficient_scope",
        )
        .await;
    }
);

db_test!(
    a_tenant_has_at_most_fifty_channels,
    |config| {
        config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()];
    },
    |app| {
        let tenant = app.new_tenant("free").await;
        let body = json!({"name": "ops", "channel_type": "slack", "events": ["agent.blocked"],
                      "config": {"webhook_url": "http://127.0.0.1:9/a"}});
        for _ in 0..50 {
            create_channel(&app, &tenant, body.clone()).await;
        }
        let response = app
            .post("/notifications/channels", &tenant.admin_key, body)
            .await;
        expect_error(response, 409, "channel_limit_reached").await;
        assert_eq!(
            app.count_rows("notification_channels", &tenant.id).await,
            50
        );
    }
);

/// The test send reports delivery and failure alike with HTTP 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_send_says_whether_and_why_not() {
    let app = notifying_app(Backend::Sqlite, |_| {}).await;
    let mut receiver = Receiver::start().await;
    let tenant = app.new_tenant("free").await;
    let key = &tenant.admin_key;
    let hook = create_channel(
        &app,
        &tenant,
        json!({"name": "siem", "channel_type": "webhook", "events": ["agent.blocked"],
               "config": {"url": receiver.url("/webhook")}}),
    )
    .await;
    receiver
        .set_secret(hook["signing_secret"].as_str().unwrap())
        .await;
    let test = format!(
        "/notifications/channels/{}/test",
        hook["id"].as_str().unwrap()
    );
    let result = expect_status(app.post(&test, key, json!({})).await, 200).await;
    assert_eq!(result["success"], true, "{result}");
    let received = receiver
        .wait_for("the test message", |r| {
            r["webhook"].as_array().unwrap().len() == 1
        })
        .await;
    assert_eq!(
        received["webhook"][0]["payload"]["type"],
        "notification.test"
    );

    let redirect = create_channel(
        &app,
        &tenant,
        json!({"name": "moved", "channel_type": "slack", "events": ["agent.blocked"],
               "config": {"webhook_url": receiver.url("/redirect")}}),
    )
    .await;
    let path = format!(
        "/notifications/channels/{}/test",
        redirect["id"].as_str().unwrap()
    );
    let result = expect_status(app.post(&path, key, json!({})).await, 200).await;
    assert_eq!(result["success"], false);

    // The console's test button: the same sends, their outcome shown at the channel.
    let mut browser = Browser::new(&app);
    browser.sign_in_with_key(key).await;
    let page = browser.get("/console/notifications").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("siem (webhook)") && page.body.contains("moved (slack)"));
    let hook_id = hook["id"].as_str().unwrap();
    let tested = browser
        .post(
            &format!("/console/notifications/{hook_id}/test"),
            &[("csrf", &page.csrf())],
        )
        .await;
    assert_eq!(tested.status, 200, "{}", tested.body);
    let row = &tested.body[tested.body.find(&format!("id=\"test-{hook_id}\"")).unwrap()..];
    assert!(
        row[..row.find("</form>").unwrap()].contains("Test delivered"),
        "{row}"
    );
    receiver
        .wait_for("the console's test message", |r| {
            r["webhook"].as_array().unwrap().len() == 2
        })
        .await;
    // With htmx, only the outcome comes back, for the row.
    let fragment = app
        .client
        .post(format!(
            "{}/console/notifications/{}/test",
            app.base,
            redirect["id"].as_str().unwrap()
        ))
        .header(reqwest::header::COOKIE, browser.cookie_header())
        .header(reqwest::header::ORIGIN, &app.base)
        .header("hx-request", "true")
        .form(&[("csrf", page.csrf())])
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        fragment.starts_with("<span class=\"badge broken\">Test failed:"),
        "{fragment}"
    );
    assert!(fragment.contains("302"), "{fragment}");
    let message = result["message"].as_str().unwrap();
    assert!(
        message.contains("302") && message.contains("not followed"),
        "{message}"
    );

    receiver.stop();
    let result = expect_status(app.post(&test, key, json!({})).await, 200).await;
    assert_eq!(result["success"], false);
    assert!(
        result["message"].as_str().unwrap().contains("cannot reach"),
        "{result}"
    );
}

db_test!(
    approvals_requested_and_expired_are_queued_for_their_channels,
    |config| {
        config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()];
    },
    |app| {
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let hook = create_channel(
            &app,
            &tenant,
            json!({"name": "reviewers", "channel_type": "webhook", "events": ["approval.requested"],
               "config": {"url": "http://127.0.0.1:9/"}}),
        )
        .await;
        let channel_id = hook["id"].as_str().unwrap();
        let agent = app.register_agent(key, json!({ "name": "payer" })).await;
        let agent_id = agent["id"].as_str().unwrap();
        let policy = crate::helpers::create_policy(
            &app,
            key,
            json!({"name": "approve gpt-4o", "policy_type": "require_approval",
               "config": {"models": ["gpt-4o"]}}),
        )
        .await;
        let policy_id = policy["id"].as_i64().unwrap();
        let ack = report_decisions(
            &app,
            &format!("notify-{}", tenant.id),
            &[json!({
                "tenant_id": tenant.id,
                "evaluation": { "request_id": "req-1", "agent_id": agent_id, "provider": "openai",
                    "model": "gpt-4o", "evaluated_at": "2026-11-23T10:00:00Z",
                    "results": [{ "policy_id": policy_id, "policy_name": "approve gpt-4o",
                        "policy_type": "require_approval", "result": "fail",
                        "reason": "requires human approval" }] },
                "approval": { "policy_id": policy_id,
                    "request_context": { "provider": "openai", "model": "gpt-4o" } },
            })],
        )
        .await;
        assert_eq!(ack["approvals_created"], 1, "{ack}");
        let path = format!("/notifications/channels/{channel_id}/deliveries");
        let history = expect_status(app.get(&path, key).await, 200).await;
        assert_eq!(
            history["data"][0]["event_type"], "approval.requested",
            "{history}"
        );
        assert_eq!(history["data"][0]["status"], "pending");

        // A day later the sweep expires it, audited and announced (the channel follows
        // requests, so it hears how they end).
        app.clock.advance(24 * 3_600_000 + 1);
        let expired = warden_control_plane::api::approvals::expire_lapsed(&app.db, app.clock.now())
            .await
            .unwrap();
        assert!(expired >= 1);
        let history = expect_status(app.get(&path, key).await, 200).await;
        assert_eq!(history["meta"]["total"], 2, "{history}");
        assert_eq!(history["data"][0]["event_type"], "approval.expired");
        let approvals = expect_status(app.get("/approvals?status=expired", key).await, 200).await;
        assert_eq!(approvals["meta"]["total"], 1);
    }
);

/// Email requires STARTTLS by default and verifies the server's certificate (here one a
/// CA the operator trusts through `notifications.smtp_ca_file` signed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn email_requires_starttls_by_default_and_verifies_the_server() {
    let receiver = Receiver::start_with_starttls().await;
    let tls = receiver.starttls.as_ref().unwrap();
    let ca_file = tls.ca_file.clone();
    let mut app = notifying_app(Backend::Sqlite, |config| {
        config.notifications.smtp_ca_file = Some(ca_file);
    })
    .await;
    let tenant = app.new_tenant("free").await;
    let key = tenant.admin_key.clone();
    let mail = |port: u16| {
        json!({"name": "mail", "channel_type": "email", "events": ["agent.blocked"],
               "config": {"to": ["secops@example.com"], "from": "warden@example.com",
                          "smtp_host": "127.0.0.1", "smtp_port": port}})
    };
    let secure = create_channel(&app, &tenant, mail(tls.port)).await;
    assert_eq!(secure["config"]["security"], "starttls");
    let secure_test = format!(
        "/notifications/channels/{}/test",
        secure["id"].as_str().unwrap()
    );
    let result = expect_status(app.post(&secure_test, &key, json!({})).await, 200).await;
    assert_eq!(result["success"], true, "{result}");
    let received = receiver
        .wait_for("the test email", |r| {
            r["email"].as_array().unwrap().len() == 1
        })
        .await;
    assert_eq!(received["email"][0]["tls"], true);
    assert!(received["email"][0]["subject"]
        .as_str()
        .unwrap()
        .contains("Test notification"));

    // A server that offers no STARTTLS is refused rather than sent to in the clear.
    let plain = create_channel(&app, &tenant, mail(receiver.smtp_port)).await;
    let plain_test = format!(
        "/notifications/channels/{}/test",
        plain["id"].as_str().unwrap()
    );
    let result = expect_status(app.post(&plain_test, &key, json!({})).await, 200).await;
    assert_eq!(result["success"], false, "{result}");
    assert!(
        result["message"]
            .as_str()
            .unwrap()
            .contains("SMTP delivery"),
        "{result}"
    );

    // Without the operator's CA the certificate is not trusted.
    app.restart_with(|config| config.notifications.smtp_ca_file = None)
        .await;
    let result = expect_status(app.post(&secure_test, &key, json!({})).await, 200).await;
    assert_eq!(result["success"], false, "{result}");
    assert!(
        result["message"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("certificate"),
        "{result}"
    );
    assert_eq!(
        receiver.received().await["email"].as_array().unwrap().len(),
        1
    );
}
