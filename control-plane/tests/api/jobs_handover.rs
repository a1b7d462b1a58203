//! A background job handed over between control planes: two `warden control-plane`
//! processes on a database of their own, the notification worker and the anomaly
//! detector each elected by its lease. The holder is killed (`kill -9`) with
//! notifications waiting; the other takes both leases once they lapse and delivers
//! them, and the receiver gets every event exactly once (by its `webhook-id`, the same on
//! every attempt).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::routing::post;
use serde_json::json;

use crate::helpers::{expect_status, Backend, TestApp, SERVICE_TOKEN};
use crate::proxy::eventually;
use crate::replica_process::ControlPlaneProcess;

/// The notification worker on, sending to local receivers, and anomaly detection every
/// second (its lease lasts three rounds).
const WORKER_ON: &[(&str, &str)] = &[
    ("WARDEN_NOTIFICATIONS__DELIVERY_INTERVAL_MS", "200"),
    ("WARDEN_ANOMALY_DETECTION_INTERVAL_SECS", "1"),
    ("WARDEN_OUTBOUND__ALLOW_PRIVATE", "[\"127.0.0.1/32\"]"),
];

/// The anomaly detector's lease.
const DETECTOR: &str = warden_control_plane::anomalies::LEASE_JOB;

/// A webhook receiver that keeps the `webhook-id` of every delivery it gets.
async fn receiver() -> (String, Arc<Mutex<Vec<String>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let sink = received.clone();
    #[allow(clippy::disallowed_methods)] // A test's receiver, not an API route.
    let app = axum::Router::new().route(
        "/hook",
        post(move |headers: HeaderMap| {
            let sink = sink.clone();
            async move {
                let id = headers
                    .get("webhook-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                sink.lock().unwrap().push(id);
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/hook"), received)
}

async fn holder(app: &TestApp) -> Option<String> {
    holder_of(app, "notifications").await
}

async fn holder_of(app: &TestApp, job: &str) -> Option<String> {
    sqlx::query_scalar("SELECT holder FROM worker_leases WHERE job = $1")
        .bind(job)
        .fetch_optional(app.db.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_elected_jobs_move_to_the_survivor_and_each_event_is_sent_once() {
    // This process's own control plane writes (its worker off); the two replicas send.
    let app = TestApp::spawn_alone(Backend::Postgres, |config| {
        config.notifications.delivery_interval_ms = 0;
        config.anomaly_detection_interval_secs = 0;
        config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()];
    })
    .await;
    let (url, received) = receiver().await;
    let tenant = app.new_tenant("enterprise").await;
    let key = &tenant.admin_key;
    expect_status(
        app.post(
            "/notifications/channels",
            key,
            json!({ "name": "ops", "channel_type": "webhook",
                    "events": ["agent.blocked", "agent.unblocked"], "config": { "url": url } }),
        )
        .await,
        201,
    )
    .await;
    let agent = app.register_agent(key, json!({ "name": "flapping" })).await;
    let agent_id = agent["id"].as_str().unwrap().to_owned();
    let flap = |times: usize| {
        let (app, agent_id) = (&app, agent_id.clone());
        async move {
            for _ in 0..times {
                for action in ["block", "unblock"] {
                    let body = match action {
                        "block" => json!({ "reason": "handover" }),
                        _ => json!({}),
                    };
                    let path = format!("/agents/{agent_id}/{action}");
                    expect_status(app.post(&path, key, body).await, 204).await;
                }
            }
        }
    };
    let count = || received.lock().unwrap().len();

    // The first replica takes the worker's lease, then the second starts.
    let mut first = ControlPlaneProcess::start(&app.database_url(), WORKER_ON);
    first.wait_ready().await;
    eventually(Duration::from_secs(10), || async { holder(&app).await }).await;
    let first_holder = holder(&app).await.unwrap();
    let detector = eventually(Duration::from_secs(10), || async {
        holder_of(&app, DETECTOR).await
    })
    .await;
    assert_eq!(detector, first_holder, "the first replica detects");
    let second = ControlPlaneProcess::start(&app.database_url(), WORKER_ON);
    second.wait_ready().await;
    flap(5).await;
    eventually(Duration::from_secs(10), || async {
        (count() == 10).then_some(())
    })
    .await;
    // Recorded as delivered too, so the kill below falls between sends, not inside one
    // (a holder killed after a receiver answered and before it recorded the delivery
    // sends that one message again, under the same `webhook-id`).
    eventually(Duration::from_secs(10), || async {
        let undelivered: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM notification_deliveries WHERE tenant_id = $1 \
             AND status <> 'delivered'",
        )
        .bind(&tenant.id)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
        (undelivered == 0).then_some(())
    })
    .await;

    // The holder dies with notifications waiting.
    first.kill_9();
    let killed = Instant::now();
    flap(5).await;
    // Both leases watched at once: each hand-over timed from the kill.
    let (mut handed_over, mut detector_handed_over) = (None, None);
    while handed_over.is_none() || detector_handed_over.is_none() {
        assert!(killed.elapsed() < Duration::from_secs(30), "no hand-over");
        for (job, moved) in [
            ("notifications", &mut handed_over),
            (DETECTOR, &mut detector_handed_over),
        ] {
            let now = holder_of(&app, job).await;
            if moved.is_none() && now.is_some_and(|h| h != first_holder) {
                *moved = Some(killed.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (handed_over, detector_handed_over) = (handed_over.unwrap(), detector_handed_over.unwrap());
    eventually(Duration::from_secs(15), || async {
        (count() >= 20).then_some(())
    })
    .await;
    let delivered = killed.elapsed();
    // Nothing more arrives, and nothing arrived twice.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let ids = received.lock().unwrap().clone();
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    println!(
        "notification worker: lease handed over {handed_over:?} after kill -9 (its lease \
         lasts 10 s), the waiting events delivered {delivered:?} after it; {} deliveries, \
         {} distinct; anomaly detector handed over {detector_handed_over:?} after it (its \
         lease lasts 3 s)",
        ids.len(),
        unique.len()
    );
    assert_eq!(unique.len(), 20, "every event delivered: {ids:?}");
    assert_eq!(ids.len(), 20, "each exactly once: {ids:?}");
    assert!(handed_over <= Duration::from_secs(12), "{handed_over:?}");
    assert!(
        detector_handed_over <= Duration::from_secs(6),
        "{detector_handed_over:?}"
    );
    drop(second);
}

/// The approval expiry round is not elected: every replica runs it, so rounds that
/// overlap must expire, and audit (and so announce), each approval once. Eight rounds
/// at the same instant on one database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_expired_by_two_replicas_at_once_are_each_expired_once() {
    // The rounds are run by the test itself (the apps' own are off).
    let one = TestApp::spawn_alone(Backend::Postgres, |config| {
        config.approval_expiry_interval_secs = 0;
    })
    .await;
    let tenant = one.new_tenant("enterprise").await;
    let key = &tenant.admin_key;
    let policy = crate::helpers::create_policy(
        &one,
        key,
        json!({ "name": "hold", "policy_type": "require_approval",
                "config": { "models": ["gpt-4o"] } }),
    )
    .await;
    let policy_id = policy["id"].as_i64().unwrap();
    // Forty agents' requests held, then their 24 hours run out on both clocks.
    let held = 40;
    let mut decisions = Vec::new();
    for index in 0..held {
        let agent = one
            .register_agent(key, json!({ "name": format!("held-{index}") }))
            .await;
        decisions.push(json!({
            "tenant_id": tenant.id,
            "evaluation": { "request_id": format!("held-{index}"), "agent_id": agent["id"],
                "provider": "openai", "model": "gpt-4o",
                "evaluated_at": one.clock.now().to_string(),
                "results": [{ "policy_id": policy_id, "policy_name": "hold",
                    "policy_type": "require_approval", "result": "fail",
                    "reason": "requires human approval" }] },
            "approval": { "policy_id": policy_id,
                "request_context": { "provider": "openai", "model": "gpt-4o" } },
        }));
    }
    let ack = crate::helpers::report_decisions(&one, "held-many", &decisions).await;
    assert_eq!(ack["approvals_created"], json!(held));
    one.clock.advance(24 * 3_600_000 + 1_000);
    // Eight rounds at the same instant, as replicas whose timers line up.
    let db = one.db.clone();
    let now = one.clock.now();
    let rounds: Vec<_> = (0..8)
        .map(|_| {
            let db = db.clone();
            tokio::spawn(async move {
                warden_control_plane::api::approvals::expire_lapsed(&db, now)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut total = 0;
    for round in rounds {
        total += round.await.unwrap();
    }
    assert_eq!(
        total, held as usize,
        "the rounds together expired each once"
    );
    let expired = || async {
        let page = one
            .get("/audit-trail?event_type=approval.expired&limit=100", key)
            .await;
        expect_status(page, 200).await["meta"]["total"]
            .as_i64()
            .unwrap()
    };
    assert_eq!(
        expired().await,
        held,
        "each approval audited as expired once"
    );
    let pending = expect_status(
        one.get("/approvals?status=expired&limit=100", key).await,
        200,
    )
    .await["meta"]["total"]
        .clone();
    assert_eq!(pending, json!(held));
}

/// Closing the ledger's days is not elected either: rounds of several replicas that
/// overlap close each day once, into its daily and monthly rows alike. Eight rounds at
/// the same instant over three days of usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn days_closed_by_overlapping_rounds_are_each_closed_once() {
    let app = TestApp::spawn_alone(Backend::Postgres, |config| {
        config.close_days_interval_secs = 0;
    })
    .await;
    let tenant = app.new_tenant("enterprise").await;
    let agent = app
        .register_agent(&tenant.admin_key, json!({ "name": "closer" }))
        .await;
    let agent_id = agent["id"].as_str().unwrap();
    // A record an hour for three days.
    let start = app.clock.now().as_millis();
    let records: Vec<_> = (0..72)
        .map(|hour| {
            json!({ "record_id": format!("close-{hour}"), "tenant_id": tenant.id,
                    "agent_id": agent_id, "model_provider": "openai", "model_name": "gpt-4o",
                    "input_tokens": 1, "output_tokens": 1, "cost_usd": 0.0001,
                    "recorded_at": warden_shared::timestamp::Timestamp::from_millis(
                        start + hour * 3_600_000).to_string() })
        })
        .collect();
    app.clock.advance(72 * 3_600_000);
    let ingested = app
        .client
        .post(format!("{}/internal/v1/usage-batches", app.base))
        .bearer_auth(SERVICE_TOKEN)
        .json(&json!({ "batch_id": "three-days", "records": records }))
        .send()
        .await
        .unwrap();
    assert_eq!(
        expect_status(ingested, 200).await["data"]["accepted"],
        json!(72)
    );
    app.clock.advance(3_600_000);
    let now = app.clock.now();
    let rounds: Vec<_> = (0..8)
        .map(|_| {
            let db = app.db.clone();
            tokio::spawn(async move {
                warden_control_plane::ledger::close_days(&db, now)
                    .await
                    .unwrap()
            })
        })
        .collect();
    for round in rounds {
        round.await.unwrap();
    }
    let sum = |table: &'static str| {
        let app = &app;
        let tenant_id = tenant.id.clone();
        async move {
            let sql = format!(
                "SELECT CAST(COALESCE(SUM(requests), 0) AS BIGINT) FROM {table} WHERE tenant_id = $1"
            );
            sqlx::query_scalar::<_, i64>(&sql)
                .bind(tenant_id)
                .fetch_one(app.db.pool())
                .await
                .unwrap()
        }
    };
    // Every closed day once in each level; what is still open, once in its own.
    let (daily, monthly, open) = (
        sum("usage_daily").await,
        sum("usage_monthly").await,
        sum("usage_daily_open").await,
    );
    assert_eq!(daily, monthly, "monthly rows hold exactly the closed days");
    assert_eq!(daily + open, 72, "every hour's request counted once");
    assert!(daily >= 48, "at least two days closed: {daily}");
}

/// The violation summaries are not elected either: overlapping rounds audit each
/// minute's repeats once. Ten refusals in one minute, eight rounds at the same instant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn violations_summarized_by_overlapping_rounds_are_each_audited_once() {
    let app = TestApp::spawn_alone(Backend::Postgres, |config| {
        config.violation_summary_interval_secs = 0;
    })
    .await;
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let agent = app.register_agent(key, json!({ "name": "refused" })).await;
    let decisions: Vec<_> = (0..10)
        .map(|request| {
            json!({ "tenant_id": tenant.id, "evaluation": {
                "request_id": format!("refused-{request}"), "agent_id": agent["id"],
                "provider": "openai", "model": "gpt-4o",
                "evaluated_at": "2026-11-23T10:00:00Z",
                "results": [{ "policy_id": 1, "policy_name": "one",
                    "policy_type": "model_allowlist", "result": "fail",
                    "reason": "not allowed" }] } })
        })
        .collect();
    crate::helpers::report_decisions(&app, "refusals", &decisions).await;
    let later = warden_shared::timestamp::Timestamp::parse_rfc3339("2026-11-23T10:02:00Z")
        .unwrap()
        .as_millis();
    let rounds: Vec<_> = (0..8)
        .map(|_| {
            let db = app.db.clone();
            tokio::spawn(async move {
                warden_control_plane::api::policies::summarize_violations(&db, later, None)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut written = 0;
    for round in rounds {
        written += round.await.unwrap();
    }
    assert_eq!(written, 1, "one summary for the minute's nine repeats");
    let events = expect_status(
        app.get("/audit-trail?event_type=policy.violated&target_id=1", key)
            .await,
        200,
    )
    .await;
    let counts: Vec<i64> = events["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event["details"]["count"].as_i64().unwrap())
        .collect();
    assert_eq!(counts, [9, 1]);
}

/// Scheduled plan changes are not elected either: overlapping rounds apply (and audit)
/// each once. Twenty downgrades due, eight rounds at the same instant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_changes_applied_by_overlapping_rounds_are_each_applied_once() {
    let app = TestApp::spawn_alone(Backend::Postgres, |config| {
        config.billing.plan_change_interval_secs = 0;
    })
    .await;
    let mut keys = Vec::new();
    for _ in 0..20 {
        let tenant = app.new_tenant("professional").await;
        let downgrade = app
            .post(
                "/billing/checkout",
                &tenant.admin_key,
                json!({ "plan": "starter" }),
            )
            .await;
        assert_eq!(
            expect_status(downgrade, 200).await["data"]["action"],
            "downgrade"
        );
        keys.push(tenant.admin_key);
    }
    app.clock.advance(32 * 86_400_000);
    let now = app.clock.now();
    let rounds: Vec<_> = (0..8)
        .map(|_| {
            let db = app.db.clone();
            tokio::spawn(async move {
                warden_control_plane::api::billing::apply_due_plan_changes(&db, now)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut applied = 0;
    for round in rounds {
        applied += round.await.unwrap();
    }
    assert_eq!(applied, 20, "each downgrade applied once");
    for key in &keys {
        let billing = expect_status(app.get("/billing", key).await, 200).await;
        assert_eq!(billing["data"]["plan"], "starter");
    }
}
