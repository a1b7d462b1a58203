//! A shared rate limit's next minute is asked for ahead: in a minute's last seconds the
//! proxy asks, in one batch, for the next minute of every bucket it served, so that the
//! next minute's first requests wait on no ask of their own (a per-key limit over
//! thousands of keys would otherwise ask thousands of times at every minute's start).

use std::time::Duration;

use serde_json::json;

use super::{eventually, MockProvider, TestProxy};
use crate::helpers::{create_policy, Backend, TestApp};

/// The control plane's answers to single rate-grant asks so far.
async fn single_asks(app: &TestApp) -> f64 {
    app.metrics()
        .await
        .lines()
        .filter(|line| line.starts_with("warden_http_requests_total{"))
        .filter(|line| line.contains("route=\"/internal/v1/rate-grants\""))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn granted_rows(app: &TestApp, minute: i64) -> Vec<(String, i64)> {
    sqlx::query_as("SELECT bucket, granted FROM rate_grants WHERE minute = $1 ORDER BY bucket")
        .bind(minute)
        .fetch_all(app.db.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_minute_of_every_bucket_served_is_granted_before_it_comes() {
    let app = TestApp::spawn_with(Backend::Sqlite, |_| {}).await;
    let mock = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &mock).await;
    let tenant = app.new_tenant("enterprise").await;
    let admin = tenant.admin_key.clone();
    create_policy(
        &app,
        &admin,
        json!({ "name": "per key", "policy_type": "rate_limit",
                "config": { "requests_per_minute": 600, "per": "key" } }),
    )
    .await;
    let mut keys = Vec::new();
    for n in 0..5 {
        let body = json!({ "developer_label": format!("key-{n}") });
        keys.push(proxy.new_key(&app, &admin, body).await.0);
    }
    // Five seconds into a minute, every key is served: each asks for its minute.
    let now = app.clock.now_ms();
    app.clock.advance(60_000 - now.rem_euclid(60_000) + 5_000);
    let minute = app.clock.now_ms().div_euclid(60_000);
    for key in &keys {
        for _ in 0..3 {
            assert_eq!(proxy.chat_answer(key, "gpt-4o-mini").await.0, 200);
        }
    }
    assert_eq!(granted_rows(&app, minute).await.len(), 5);
    assert!(granted_rows(&app, minute + 1).await.is_empty());

    // In the minute's last seconds the next minute is granted, all five at once.
    app.clock.advance(47_000);
    let ahead = eventually(Duration::from_secs(5), || async {
        let rows = granted_rows(&app, minute + 1).await;
        (rows.len() == 5).then_some(rows)
    })
    .await;
    // At the pace of 3 requests in the minute's first 52 seconds: 3 wanted each.
    assert!(ahead.iter().all(|(_, granted)| *granted == 3), "{ahead:?}");

    // The next minute's requests are admitted on what was granted, asking nothing.
    let asked = single_asks(&app).await;
    app.clock.advance(10_000);
    for key in &keys {
        for _ in 0..3 {
            assert_eq!(proxy.chat_answer(key, "gpt-4o-mini").await.0, 200);
        }
    }
    assert_eq!(single_asks(&app).await, asked, "no bucket asked on its own");
    // Past what was granted ahead, a bucket asks for more as before.
    assert_eq!(proxy.chat_answer(&keys[0], "gpt-4o-mini").await.0, 200);
    assert_eq!(single_asks(&app).await, asked + 1.0);
}
