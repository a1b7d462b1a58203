//! Delivery end to end: an agent blocked reaches all four channel types in their real
//! formats; a receiver that was down gets every event once it is back; a hanging
//! receiver does not hold back the others.

use serde_json::{json, Value};

use super::{counts, create_channel, four_channels, notifying_app, Receiver, ROUTING_KEY};
use crate::helpers::{expect_status, Backend, TestApp};

/// Runs the body on SQLite and on PostgreSQL against a `notifying_app`.
macro_rules! notify_test {
    ($name:ident, |$app:ident| $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                #[allow(unused_mut)]
                let mut $app = notifying_app(Backend::Sqlite, |_| {}).await;
                $body
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                #[allow(unused_mut)]
                let mut $app = notifying_app(Backend::Postgres, |_| {}).await;
                $body
            }
        }
    };
}

async fn deliveries(app: &TestApp, key: &str, channel_id: &str) -> Vec<Value> {
    let path = format!("/notifications/channels/{channel_id}/deliveries");
    expect_status(app.get(&path, key).await, 200).await["data"]
        .as_array()
        .unwrap()
        .clone()
}

notify_test!(
    a_blocked_agent_reaches_slack_pagerduty_a_webhook_and_email,
    |app| {
        let mut receiver = Receiver::start().await;
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let ids = four_channels(&app, &tenant, &mut receiver, &["agent.blocked"]).await;
        let agent = app
            .register_agent(key, json!({ "name": "invoice-bot" }))
            .await;
        let agent_id = agent["id"].as_str().unwrap();

        let response = app
            .post(
                &format!("/agents/{agent_id}/block"),
                key,
                json!({ "reason": "wire fraud attempt" }),
            )
            .await;
        assert_eq!(response.status().as_u16(), 204);
        let received = receiver
            .wait_for("one message per channel", |r| counts(r) == [1, 1, 1, 1])
            .await;

        let slack = &received["slack"][0];
        assert!(
            slack["text"].as_str().unwrap().contains("Agent blocked"),
            "{slack}"
        );
        let section = slack["blocks"][1]["text"]["text"].as_str().unwrap();
        assert!(
            section.contains(agent_id) && section.contains("wire fraud attempt"),
            "{section}"
        );

        let pagerduty = &received["pagerduty"][0];
        assert_eq!(pagerduty["routing_key"], ROUTING_KEY);
        assert_eq!(pagerduty["event_action"], "trigger");
        assert_eq!(pagerduty["payload"]["severity"], "critical");
        assert_eq!(pagerduty["payload"]["class"], "agent.blocked");
        let dedup_key = pagerduty["dedup_key"].as_str().unwrap().to_owned();
        assert_eq!(
            dedup_key,
            format!("warden/{}/agent.blocked/{agent_id}", tenant.id)
        );

        // Verified by the standardwebhooks library, or it would be in `rejected`.
        let webhook = &received["webhook"][0];
        assert!(webhook["id"].as_str().unwrap().starts_with("msg_"));
        assert_eq!(webhook["payload"]["type"], "agent.blocked");
        assert_eq!(webhook["payload"]["data"]["target_id"], agent_id);
        assert_eq!(webhook["payload"]["data"]["tenant_id"], tenant.id.as_str());
        assert_eq!(
            webhook["payload"]["data"]["details"]["reason"],
            "wire fraud attempt"
        );

        let email = &received["email"][0];
        assert_eq!(
            email["rcpt_tos"],
            json!(["secops@example.com", "cto@example.com"])
        );
        assert_eq!(email["mail_from"], "warden@example.com");
        let subject = email["subject"].as_str().unwrap();
        assert!(
            subject.contains("Agent blocked") && subject.contains(agent_id),
            "{subject}"
        );
        assert!(email["body"]
            .as_str()
            .unwrap()
            .contains("wire fraud attempt"));
        assert!(email["message_id"].as_str().unwrap().starts_with("<msg_"));

        // Unblocking resolves PagerDuty's incident (same dedup key) and is announced to the
        // channels that follow blocks.
        let response = app
            .request(
                reqwest::Method::POST,
                &format!("/agents/{agent_id}/unblock"),
                Some(key),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 204);
        let received = receiver
            .wait_for("the resolution on every channel", |r| {
                counts(r) == [2, 2, 2, 2]
            })
            .await;
        // Sent once each: a channel's deliveries are read by the task that sends them,
        // never from a list made before an earlier task delivered them.
        assert_eq!(
            received["webhook"].as_array().unwrap().len(),
            2,
            "{received}"
        );
        let resolve = &received["pagerduty"][1];
        assert_eq!(resolve["event_action"], "resolve");
        assert_eq!(resolve["dedup_key"], dedup_key.as_str());
        assert_eq!(received["webhook"][1]["payload"]["type"], "agent.unblocked");

        // Each channel's history shows its deliveries delivered.
        for id in &ids {
            let history = deliveries(&app, key, id).await;
            assert_eq!(history.len(), 2, "{history:?}");
            for delivery in &history {
                assert_eq!(delivery["status"], "delivered", "{delivery}");
                assert!(delivery["attempts"].as_i64() >= Some(1), "{delivery}");
            }
        }
        let metrics = app.metrics().await;
        let exposition = openmetrics_parser::prometheus::parse_prometheus(&metrics).unwrap();
        assert!(exposition
            .families
            .contains_key("warden_notification_deliveries_total"));
        assert!(exposition
            .families
            .contains_key("warden_notification_queue_depth"));
        assert!(metrics.contains(
        "warden_notification_deliveries_total{channel_type=\"email\",outcome=\"delivered\"} 2"
    ), "{metrics}");
    }
);

notify_test!(
    a_receiver_down_for_ten_minutes_gets_every_event_once_when_back,
    |app| {
        let mut receiver = Receiver::start().await;
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let hook = create_channel(
            &app,
            &tenant,
            json!({"name": "siem", "channel_type": "webhook",
               "events": ["agent.blocked", "agent.quarantined", "agent.registered"],
               "config": {"url": receiver.url("/webhook")}}),
        )
        .await;
        let channel_id = hook["id"].as_str().unwrap();
        receiver
            .set_secret(hook["signing_secret"].as_str().unwrap())
            .await;
        receiver.stop();

        let agent = app.register_agent(key, json!({ "name": "scraper" })).await;
        let agent_id = agent["id"].as_str().unwrap();
        for action in ["block", "quarantine"] {
            let response = app
                .post(
                    &format!("/agents/{agent_id}/{action}"),
                    key,
                    json!({ "reason": "drill" }),
                )
                .await;
            assert_eq!(response.status().as_u16(), 204);
        }
        // Every delivery is tried and fails while the receiver is down.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let history = deliveries(&app, key, channel_id).await;
            let tried = history
                .iter()
                .filter(|d| d["attempts"].as_i64() > Some(0))
                .count();
            if history.len() == 3 && tried >= 1 {
                assert!(
                    history.iter().all(|d| d["status"] == "pending"),
                    "{history:?}"
                );
                let failed = history
                    .iter()
                    .find(|d| d["attempts"].as_i64() > Some(0))
                    .unwrap();
                assert!(
                    failed["last_error"]
                        .as_str()
                        .unwrap()
                        .contains("cannot reach"),
                    "{failed}"
                );
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no failed attempt: {history:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }

        // Ten minutes later the receiver is back; as time goes on the retries find it.
        app.clock.advance(10 * 60_000);
        receiver.start_again().await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let received = loop {
            let received = receiver.received().await;
            assert!(
                received["rejected"].as_array().unwrap().is_empty(),
                "{received}"
            );
            if counts(&received)[2] == 3 {
                break received;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "not all delivered: {received}"
            );
            app.clock.advance(60_000);
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        };
        // Each event arrived (a receiver keeps one message per `webhook-id`), and every
        // delivery is done.
        let mut types: Vec<&str> = received["webhook"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["payload"]["type"].as_str().unwrap())
            .collect();
        types.sort_unstable();
        types.dedup();
        assert_eq!(
            types,
            ["agent.blocked", "agent.quarantined", "agent.registered"]
        );
        // The receiver may hold the last message a moment before its delivery is
        // recorded as done.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let history = deliveries(&app, key, channel_id).await;
            if history.iter().all(|d| d["status"] == "delivered") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{history:?}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
);

notify_test!(
    a_hanging_receiver_does_not_hold_back_other_channels,
    |app| {
        let receiver = Receiver::start().await;
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let slow = create_channel(
            &app,
            &tenant,
            json!({"name": "slow", "channel_type": "slack", "events": ["agent.registered"],
               "config": {"webhook_url": receiver.url("/hang")}}),
        )
        .await;
        create_channel(
            &app,
            &tenant,
            json!({"name": "fast", "channel_type": "slack", "events": ["agent.registered"],
               "config": {"webhook_url": receiver.url("/slack")}}),
        )
        .await;
        for name in ["one", "two", "three"] {
            app.register_agent(key, json!({ "name": name })).await;
        }
        receiver
            .wait_for("three messages on the fast channel", |r| counts(r)[0] == 3)
            .await;
        // The fast channel's messages went out while the slow channel's first attempt was
        // still waiting for its answer (10 s): nothing of the slow one is recorded yet.
        let slow_history = deliveries(&app, key, slow["id"].as_str().unwrap()).await;
        assert_eq!(slow_history.len(), 3);
        assert!(
            slow_history.iter().all(|d| d["attempts"] == 0),
            "{slow_history:?}"
        );
    }
);

/// A delivery that keeps failing past `retry_for_secs` is dead, with its attempts kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_failing_past_its_retry_time_is_dead() {
    let app = notifying_app(Backend::Sqlite, |config| {
        config.notifications.retry_for_secs = 60;
    })
    .await;
    let receiver = Receiver::start().await;
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let channel = create_channel(
        &app,
        &tenant,
        json!({"name": "wrong path", "channel_type": "slack", "events": ["agent.registered"],
               "config": {"webhook_url": receiver.url("/no-such-path")}}),
    )
    .await;
    let channel_id = channel["id"].as_str().unwrap();
    app.register_agent(key, json!({ "name": "x" })).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let history = deliveries(&app, key, channel_id).await;
        if history[0]["status"] == "dead" {
            let attempts = history[0]["attempts"].as_i64().unwrap();
            assert!(attempts >= 2, "{history:?}");
            assert!(history[0]["last_error"].as_str().unwrap().contains("404"));
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{history:?}");
        // Each retry is due within a minute of the last.
        app.clock.advance(30_000);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Two control planes on one PostgreSQL database elect one delivery worker: every event
/// is sent once, and when the worker's replica stops the other takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_sharing_a_database_deliver_each_event_once() {
    let mut first = notifying_app(Backend::Postgres, |_| {}).await;
    let url = first.database_url();
    let second = TestApp::spawn_with(Backend::Postgres, |config| {
        config.database_url = warden_control_plane::config::Secret::new(url);
        config.notifications.delivery_interval_ms = 50;
        config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()];
    })
    .await;
    let mut receiver = Receiver::start().await;
    let tenant = first.new_tenant("starter").await;
    let key = tenant.admin_key.clone();
    let hook = create_channel(
        &first,
        &tenant,
        json!({"name": "siem", "channel_type": "webhook", "events": ["agent.registered"],
               "config": {"url": receiver.url("/webhook")}}),
    )
    .await;
    receiver
        .set_secret(hook["signing_secret"].as_str().unwrap())
        .await;
    for index in 0..6 {
        // Written through both replicas.
        let app = if index % 2 == 0 { &first } else { &second };
        app.register_agent(&key, json!({ "name": format!("agent-{index}") }))
            .await;
    }
    // Each test app's clock is frozen at its start: moved on, every delivery is due on
    // whichever replica holds the lease.
    first.clock.advance(60_000);
    second.clock.advance(60_000);
    receiver
        .wait_for("six messages", |r| counts(r)[2] == 6)
        .await;
    crate::proxy::stays(
        std::time::Duration::from_millis(300),
        "six messages",
        || async { counts(&receiver.received().await)[2] == 6 },
    )
    .await;
    let received = receiver.received().await;
    assert_eq!(
        received["webhook"].as_array().unwrap().len(),
        6,
        "{received}"
    );
    let holders: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM worker_leases WHERE job = 'notifications'")
            .fetch_one(first.db.pool())
            .await
            .unwrap();
    assert_eq!(holders, 1);

    // The first replica stops (giving its lease up if it held it); the second delivers.
    first.stop().await;
    second
        .register_agent(&key, json!({ "name": "after" }))
        .await;
    receiver
        .wait_for("the seventh message", |r| counts(r)[2] == 7)
        .await;
}
