//! A proxy's asks for rate limits' allowances (`warden_proxy::rate_grants`): in a
//! minute, a bucket asks the control plane once however many of its requests come at
//! once, the buckets whose allowance ran out together ask in one batch, and the buckets
//! used in a minute ask ahead for the next.

use std::time::Duration;

use futures_util::future::join_all;
use serde_json::json;

use super::{eventually, simple_chat, MockProvider, TestProxy};
use crate::helpers::{create_policy, metric};

/// The proxy's (asks, batches) so far.
async fn asked(proxy: &TestProxy) -> (f64, f64) {
    let metrics = proxy.metrics().await;
    let count = |series| metric(&metrics, series).unwrap_or_else(|| panic!("{series} missing"));
    (
        count("warden_proxy_rate_grant_asks_total"),
        count("warden_proxy_rate_grant_batches_total"),
    )
}

db_test!(
    a_minutes_first_requests_ask_once_a_bucket_and_together,
    |app| {
        // The fifth second of a minute: asking ahead starts at the 45th.
        let now = app.clock.now_ms();
        app.clock.advance(60_000 - now.rem_euclid(60_000) + 5_000);
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, first, created) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "key-0" }))
            .await;
        let (admin, agent) = (tenant.admin_key.clone(), created["agent_id"].clone());
        // Keys of one agent: a bucket each under a per-key limit.
        let key_of = |label: &str| json!({ "developer_label": label, "agent_id": agent });
        let mut keys = vec![first];
        for i in 1..40 {
            keys.push(
                proxy
                    .new_key(&app, &admin, key_of(&format!("key-{i}")))
                    .await
                    .0,
            );
        }
        create_policy(
            &app,
            &admin,
            json!({ "name": "per key", "policy_type": "rate_limit",
                    "config": { "requests_per_minute": 1000, "per": "key" } }),
        )
        .await;
        assert_eq!(asked(&proxy).await, (0.0, 0.0));

        // Forty keys' first requests of the minute at once: forty buckets, one ask each,
        // in a few batches (the first alone, the others queued behind it).
        let answers = join_all(
            keys.iter()
                .map(|key| proxy.chat(key, simple_chat("gpt-4o"))),
        );
        for answer in answers.await {
            assert_eq!(answer.status(), 200);
        }
        let (asks, batches) = asked(&proxy).await;
        println!("40 buckets' first requests at once: {asks} asks in {batches} batches");
        assert_eq!(asks, 40.0);
        assert!(batches <= 20.0, "{batches} batches for 40 asks");

        // Twenty requests at once of a key new this minute: they wait for one ask.
        let (fresh, _) = proxy.new_key(&app, &admin, key_of("fresh")).await;
        let answers = join_all((0..20).map(|_| proxy.chat(&fresh, simple_chat("gpt-4o"))));
        for answer in answers.await {
            assert_eq!(answer.status(), 200);
        }
        assert_eq!(asked(&proxy).await.0, 41.0);

        keys.push(fresh);

        // At the 50th second, the 41 buckets used in the minute ask ahead for the next,
        // in batches; at the next minute's start their requests wait for no ask.
        app.clock.advance(45_000);
        eventually(Duration::from_secs(5), || async {
            (asked(&proxy).await.0 == 82.0).then_some(())
        })
        .await;
        app.clock.advance(10_000);
        let answers = join_all(
            keys.iter()
                .map(|key| proxy.chat(key, simple_chat("gpt-4o"))),
        );
        for answer in answers.await {
            assert_eq!(answer.status(), 200);
        }
        assert_eq!(asked(&proxy).await.0, 82.0);

        // A bucket first used late in the minute asks then, and ahead with the others.
        let (late, _) = proxy.new_key(&app, &admin, key_of("late")).await;
        assert_eq!(proxy.chat(&late, simple_chat("gpt-4o")).await.status(), 200);
        assert_eq!(asked(&proxy).await.0, 83.0);
        app.clock.advance(45_000);
        eventually(Duration::from_secs(5), || async {
            (asked(&proxy).await.0 == 125.0).then_some(())
        })
        .await;
        // Buckets not used in a minute do not ask ahead: of the 42 granted ahead for
        // this one, the 10 used in it ask for the next.
        app.clock.advance(15_000);
        for key in &keys[..10] {
            assert_eq!(proxy.chat(key, simple_chat("gpt-4o")).await.status(), 200);
        }
        app.clock.advance(45_000);
        eventually(Duration::from_secs(5), || async {
            (asked(&proxy).await.0 == 135.0).then_some(())
        })
        .await;
        let (asks, batches) = asked(&proxy).await;
        println!("after three minutes: {asks} asks in {batches} batches");
    }
);

db_test!(a_burst_past_one_grant_asks_again_not_refused, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (tenant, key, created) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "bursty" }))
        .await;
    // 100 a minute: the first grant is 12, so most of a burst of 60 finds this proxy's
    // allowance used up by the others, not the limit reached.
    let scope = format!("agent:{}", created["agent_id"].as_str().unwrap());
    create_policy(
        &app,
        &tenant.admin_key,
        json!({ "name": "a hundred", "policy_type": "rate_limit", "scope": scope,
                "config": { "requests_per_minute": 100 } }),
    )
    .await;
    let burst = || join_all((0..60).map(|_| proxy.chat(&key, simple_chat("gpt-4o"))));
    let mut statuses = Vec::new();
    for _ in 0..2 {
        statuses.extend(burst().await.into_iter().map(|a| a.status().as_u16()));
    }
    let admitted = statuses.iter().filter(|s| **s == 200).count();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    println!(
        "two bursts of 60 against 100 a minute: {admitted} admitted, {refused} refused, {} asks",
        asked(&proxy).await.0
    );
    // The whole limit and not one more: the 60 of the first burst all pass.
    assert_eq!(statuses[..60].iter().filter(|s| **s == 200).count(), 60);
    assert_eq!((admitted, refused), (100, 20));
});
