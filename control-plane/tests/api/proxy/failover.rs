//! A control plane killed (`kill -9`) under load, in the scale-out topology: two
//! `warden control-plane` processes on one PostgreSQL behind a TCP balancer (what a
//! Kubernetes Service does: a new connection goes to a live replica), three proxies
//! following them through it. The proxies keep serving from their state, reconnect
//! through the balancer to the live control plane, no agent request fails, usage lands
//! exactly once, and a write through the survivor is in force on every proxy when it
//! returns.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::balancer::Balancer;
use super::{eventually, simple_chat, MockProvider, TestProxy};
use crate::helpers::{expect_status, Backend, TestApp};
use crate::replica_process::ControlPlaneProcess;
use serde_json::json;

/// The background rounds off on the killed and surviving control planes: the shared
/// test database holds other tests' tenants, on their own clocks.
const ROUNDS_OFF: &[(&str, &str)] = &[
    ("WARDEN_CLOSE_DAYS_INTERVAL_SECS", "0"),
    ("WARDEN_VIOLATION_SUMMARY_INTERVAL_SECS", "0"),
    ("WARDEN_APPROVAL_EXPIRY_INTERVAL_SECS", "0"),
    ("WARDEN_ANOMALY_DETECTION_INTERVAL_SECS", "0"),
    ("WARDEN_PAYLOAD_PURGE_INTERVAL_SECS", "0"),
    ("WARDEN_AUDIT_VERIFICATION_INTERVAL_SECS", "0"),
    ("WARDEN_NOTIFICATIONS__DELIVERY_INTERVAL_MS", "0"),
    ("WARDEN_BILLING__PLAN_CHANGE_INTERVAL_SECS", "0"),
];

#[derive(Default)]
struct Answers {
    served: AtomicI64,
    other: AtomicI64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_killed_under_load_fails_no_request_and_loses_no_usage() {
    // The test's own control plane (in process) creates the tenant and reads the
    // ledger; the two processes serve the proxies.
    let app = TestApp::spawn_with(Backend::Postgres, |_| {}).await;
    let database_url = app.database_url();
    let mut a = ControlPlaneProcess::start(&database_url, ROUNDS_OFF);
    let b = ControlPlaneProcess::start(&database_url, ROUNDS_OFF);
    a.wait_ready().await;
    b.wait_ready().await;
    let service = Balancer::start(vec![a.addr, b.addr]).await.addr;
    let provider = MockProvider::start().await;
    let mut proxies = Vec::new();
    for _ in 0..3 {
        let proxy = TestProxy::start_with(&app, &provider, |config| {
            config.control_plane_url = format!("http://{service}");
        })
        .await;
        proxies.push(proxy);
    }
    let (tenant, key, created) = proxies[0]
        .tenant_with_key(&app, json!({ "developer_label": "failover" }))
        .await;
    for proxy in &proxies[1..] {
        assert_eq!(proxy.chat_answer(&key, "gpt-4o-mini").await.0, 200);
    }
    let warmed = 2;

    // Agents at work on every proxy before, during and after the kill.
    let answers = Arc::new(Answers::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut traffic = tokio::task::JoinSet::new();
    for proxy in &proxies {
        let (answers, stop) = (answers.clone(), stop.clone());
        let (client, base, key) = (proxy.client.clone(), proxy.base.clone(), key.clone());
        traffic.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let answer = client
                    .post(format!("{base}/v1/chat/completions"))
                    .bearer_auth(&key)
                    .json(&simple_chat("gpt-4o-mini"))
                    .send()
                    .await
                    .map(|r| r.status().as_u16());
                let counter = match answer {
                    Ok(200) => &answers.served,
                    _ => &answers.other,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    }
    let served = || answers.served.load(Ordering::Relaxed);
    eventually(Duration::from_secs(5), || async {
        (served() >= 30).then_some(())
    })
    .await;

    a.kill_9();
    let killed = Instant::now();
    let served_at_kill = served();
    // A change made through the survivor reaches every proxy: each follows it now (the
    // dead one can publish nothing). The proxies whose stream was on the killed one
    // reconnected through the balancer.
    let survivor = reqwest::Client::new();
    let api = format!("http://{}/api/v1", b.addr);
    let changed = survivor
        .post(format!("{api}/policies"))
        .bearer_auth(&tenant.admin_key)
        .json(
            &json!({ "name": "no nvidia", "policy_type": "block_provider",
                       "config": { "providers": ["nvidia"] } }),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(changed.status(), 201);
    let metrics = survivor
        .get(format!("http://{}/metrics", b.addr))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let version = metrics
        .lines()
        .find_map(|line| line.strip_prefix("warden_state_version "))
        .and_then(|value| value.parse::<f64>().ok())
        .unwrap() as i64;
    for proxy in &proxies {
        eventually(Duration::from_secs(10), || async {
            let health: serde_json::Value = proxy
                .client
                .get(format!("{}/healthz", proxy.base))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            (health["snapshot_version"].as_i64()? >= version).then_some(())
        })
        .await;
    }
    let followed = killed.elapsed();
    // The agents keep working a while on the survivor's proxies' state and ledger, then
    // stop before the block below.
    eventually(Duration::from_secs(10), || async {
        (served() >= served_at_kill + 100).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    while let Some(done) = traffic.join_next().await {
        done.unwrap();
    }
    // From now on a write through the survivor is in force on all three when it returns.
    let agent_id = created["agent_id"].as_str().unwrap();
    let blocked = survivor
        .post(format!("{api}/agents/{agent_id}/block"))
        .bearer_auth(&tenant.admin_key)
        .json(&json!({ "reason": "failover" }))
        .send()
        .await
        .unwrap();
    assert_eq!(blocked.status(), 204);
    assert_eq!(
        blocked.headers()["warden-enforcement"].to_str().unwrap(),
        "applied"
    );
    for proxy in &proxies {
        let (status, body) = proxy.chat_answer(&key, "gpt-4o-mini").await;
        assert_eq!(status, 403, "{body}");
    }
    println!(
        "control plane killed: every proxy followed the survivor {followed:?} after the \
         kill; {} requests served, {} otherwise",
        served(),
        answers.other.load(Ordering::Relaxed)
    );
    assert_eq!(
        answers.other.load(Ordering::Relaxed),
        0,
        "no agent request failed"
    );

    // Usage lands exactly once: every request served (and the warm-up ones).
    let expected = served() + warmed;
    eventually(Duration::from_secs(30), || async {
        (app.count_rows("usage_records", &tenant.id).await == expected).then_some(())
    })
    .await;
    let summary = expect_status(app.get("/cost/summary", &tenant.admin_key).await, 200).await;
    assert_eq!(summary["data"]["total_requests"], json!(expected));
    for mut proxy in proxies {
        proxy.stop().await;
    }
    assert_eq!(
        app.count_rows("usage_records", &tenant.id).await,
        expected,
        "nothing counted twice"
    );
}
