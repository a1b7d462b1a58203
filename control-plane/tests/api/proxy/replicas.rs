//! The scale-out topology on one PostgreSQL: two control planes and three proxies, two
//! following the first control plane and one the second (as proxies behind a Service
//! land on either). Each promise that spans replicas, as a test, with its figure
//! printed.

use serde_json::json;

use super::read_your_writes::changes_are_in_force_when_answered;
use super::{simple_chat, MockProvider, TestProxy};
use crate::helpers::{create_policy, Backend, TestApp};

struct Topology {
    planes: [TestApp; 2],
    proxies: [TestProxy; 3],
    _provider: MockProvider,
}

async fn topology() -> Topology {
    let one = TestApp::spawn_with(Backend::Postgres, |_| {}).await;
    let two = TestApp::spawn_with(Backend::Postgres, |_| {}).await;
    let provider = MockProvider::start().await;
    let proxies = [
        TestProxy::start(&one, &provider).await,
        TestProxy::start(&one, &provider).await,
        TestProxy::start(&two, &provider).await,
    ];
    Topology {
        planes: [one, two],
        proxies,
        _provider: provider,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_on_either_control_plane_is_in_force_on_all_three_proxies() {
    let t = topology().await;
    let [one, two] = &t.planes;
    let [a, b, c] = &t.proxies;
    changes_are_in_force_when_answered(&[one, two], &[a, b, c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_served_by_three_proxies_admits_at_most_its_limit() {
    let t = topology().await;
    let [one, _] = &t.planes;
    let (tenant, raw, _) = t.proxies[0]
        .tenant_with_key(one, json!({ "developer_label": "shared-limit" }))
        .await;
    // Every proxy knows the key before the burst.
    for proxy in &t.proxies[1..] {
        assert_eq!(proxy.chat_answer(&raw, "gpt-4o-mini").await.0, 200);
    }
    let limit = 100;
    create_policy(
        one,
        &tenant.admin_key,
        json!({ "name": "a hundred a minute", "policy_type": "rate_limit",
                "config": { "requests_per_minute": limit } }),
    )
    .await;
    // 300 requests in one minute of the (manual) clock: 100 to each proxy, eight at a
    // time on each.
    let mut sent = tokio::task::JoinSet::new();
    for (index, proxy) in t.proxies.iter().enumerate() {
        for lane in 0..8 {
            let (client, url, raw) = (
                reqwest::Client::new(),
                format!("{}/v1/chat/completions", proxy.base),
                raw.clone(),
            );
            let requests = if lane < 4 { 13 } else { 12 };
            sent.spawn(async move {
                let mut statuses = Vec::new();
                for _ in 0..requests {
                    let answer = client
                        .post(&url)
                        .bearer_auth(&raw)
                        .json(&simple_chat("gpt-4o-mini"))
                        .send()
                        .await
                        .unwrap();
                    statuses.push((index, answer.status().as_u16()));
                }
                statuses
            });
        }
    }
    let mut admitted = [0; 3];
    let mut refused = 0;
    while let Some(statuses) = sent.join_next().await {
        for (index, status) in statuses.unwrap() {
            match status {
                200 => admitted[index] += 1,
                429 => refused += 1,
                other => panic!("unexpected status {other}"),
            }
        }
    }
    let total: i64 = admitted.iter().sum();
    println!(
        "rate limit of {limit}/min over three proxies: {total} admitted ({admitted:?} per proxy), \
         {refused} refused, overshoot {}",
        (total - limit).max(0)
    );
    assert!(total <= limit, "{total} admitted past a limit of {limit}");
    // Below it by at most what the other proxies hold unused at the end.
    assert!(total >= limit - 10, "only {total} of {limit} admitted");
    assert_eq!(total + refused, 300);
}
