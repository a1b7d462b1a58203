//! Server-side request forgery: without the operator's allowance, no channel may point
//! at a loopback, private, link-local, CGNAT, multicast, unspecified or metadata
//! address, however it is spelled, and the check is made again at every send.

use serde_json::{json, Value};

use super::{create_channel, Receiver};
use crate::helpers::{expect_error, expect_status, Backend, TestApp};

/// URLs every deployment refuses by default, each with the reason it is refused for.
const REFUSED: &[(&str, &str)] = &[
    ("http://127.0.0.1:8080/hook", "forbidden_address"),
    ("http://10.0.0.5/hook", "forbidden_address"),
    ("http://172.20.1.1/hook", "forbidden_address"),
    ("http://192.168.0.10/hook", "forbidden_address"),
    (
        "http://169.254.169.254/latest/meta-data/",
        "forbidden_address",
    ),
    ("http://100.64.10.1/hook", "forbidden_address"),
    (
        "http://100.100.100.200/latest/meta-data/",
        "forbidden_address",
    ),
    ("http://0.0.0.0/hook", "forbidden_address"),
    ("http://224.0.0.251/hook", "forbidden_address"),
    ("http://[::1]/hook", "forbidden_address"),
    ("http://[::]/hook", "forbidden_address"),
    ("http://[fe80::1]/hook", "forbidden_address"),
    (
        "http://[fd00:ec2::254]/latest/meta-data/",
        "forbidden_address",
    ),
    ("http://[::ffff:127.0.0.1]/hook", "forbidden_address"),
    ("http://[::ffff:a9fe:a9fe]/hook", "forbidden_address"),
    // 127.0.0.1 spelled in decimal, octal and hexadecimal, and shortened.
    ("http://2130706433/hook", "forbidden_address"),
    ("http://0177.0.0.1/hook", "forbidden_address"),
    ("http://0x7f000001/hook", "forbidden_address"),
    ("http://127.1/hook", "forbidden_address"),
    // A name that resolves to a refused address.
    ("http://localhost:8080/hook", "forbidden_address"),
    ("ftp://example.com/hook", "scheme"),
    ("file:///etc/passwd", "scheme"),
    ("http://[::1/hook", "malformed"),
];

db_test!(
    every_refused_address_and_spelling_is_a_422_that_stores_nothing,
    |app| {
        let tenant = app.new_tenant("free").await;
        let key = &tenant.admin_key;
        for (url, reason) in REFUSED {
            for (channel_type, config) in [
                ("webhook", json!({ "url": url })),
                ("slack", json!({ "webhook_url": url })),
                (
                    "pagerduty",
                    json!({ "routing_key": "k", "events_url": url }),
                ),
            ] {
                let body = json!({"name": "x", "channel_type": channel_type,
                              "events": ["agent.blocked"], "config": config});
                let error = expect_error(
                    app.post("/notifications/channels", key, body).await,
                    422,
                    "url_not_allowed",
                )
                .await;
                assert_eq!(
                    error["error"]["details"]["reason"], *reason,
                    "{url}: {error}"
                );
            }
        }
        for host in [
            "127.0.0.1",
            "localhost",
            "10.1.2.3",
            "[::1]",
            "169.254.169.254",
        ] {
            let body = json!({"name": "mail", "channel_type": "email", "events": ["agent.blocked"],
                          "config": {"to": ["a@example.com"], "from": "w@example.com",
                                     "smtp_host": host, "security": "none"}});
            let error = expect_error(
                app.post("/notifications/channels", key, body).await,
                422,
                "url_not_allowed",
            )
            .await;
            assert_eq!(
                error["error"]["details"]["field"], "config.smtp_host",
                "{host}"
            );
        }
        assert_eq!(app.count_rows("notification_channels", &tenant.id).await, 0);
        let trail: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM audit_events WHERE tenant_id = $1 AND target_type = 'notification_channel'",
    )
    .bind(&tenant.id)
    .fetch_one(app.db.pool())
    .await
    .unwrap();
        assert_eq!(trail, 0);
    }
);

/// The guard runs at every send: a channel created while the operator allowed local
/// receivers cannot reach them once the allowance is gone; redirects are not followed
/// even to an allowed host's neighbour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_runs_again_at_every_send() {
    let mut app = TestApp::spawn_alone(Backend::Sqlite, |config| {
        config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()];
    })
    .await;
    let receiver = Receiver::start().await;
    let tenant = app.new_tenant("free").await;
    let key = tenant.admin_key.clone();
    let slack = create_channel(
        &app,
        &tenant,
        json!({"name": "ops", "channel_type": "slack", "events": ["agent.blocked"],
               "config": {"webhook_url": receiver.url("/slack")}}),
    )
    .await;
    let test = format!(
        "/notifications/channels/{}/test",
        slack["id"].as_str().unwrap()
    );
    let result: Value = expect_status(app.post(&test, &key, json!({})).await, 200).await;
    assert_eq!(result["success"], true, "{result}");

    app.restart_with(|config| config.outbound.allow_private.clear())
        .await;
    let result: Value = expect_status(app.post(&test, &key, json!({})).await, 200).await;
    assert_eq!(result["success"], false);
    let message = result["message"].as_str().unwrap();
    assert!(
        message.contains("127.0.0.1") && message.contains("loopback"),
        "{message}"
    );
    let received = receiver.received().await;
    assert_eq!(received["slack"].as_array().unwrap().len(), 1);
    // And PATCHing it to another refused address is refused.
    let path = format!("/notifications/channels/{}", slack["id"].as_str().unwrap());
    let response = app
        .patch(
            &path,
            &key,
            json!({"config": {"webhook_url": "http://169.254.169.254/"}}),
        )
        .await;
    expect_error(response, 422, "url_not_allowed").await;
}

db_test!(
    a_name_that_does_not_resolve_now_is_accepted_and_its_sends_fail_clearly,
    |app| {
        let tenant = app.new_tenant("free").await;
        let key = &tenant.admin_key;
        // `.invalid` never resolves (RFC 6761): as a provider's name looks from a host
        // whose resolver cannot reach it.
        for (channel_type, config) in [
            (
                "slack",
                json!({ "webhook_url": "https://hooks.slack.invalid/services/T0/B0/x" }),
            ),
            (
                "pagerduty",
                json!({ "routing_key": "k", "events_url": "https://events.pagerduty.invalid/v2/enqueue" }),
            ),
        ] {
            let body = json!({"name": channel_type, "channel_type": channel_type,
                              "events": ["agent.blocked"], "config": config});
            let created =
                expect_status(app.post("/notifications/channels", key, body).await, 201).await;
            let id = created["data"]["id"].as_str().unwrap();
            let result = expect_status(
                app.post(
                    &format!("/notifications/channels/{id}/test"),
                    key,
                    json!({}),
                )
                .await,
                200,
            )
            .await;
            assert_eq!(result["success"], false, "{result}");
            let message = result["message"].as_str().unwrap();
            assert!(message.contains("cannot resolve"), "{message}");
        }
    }
);
