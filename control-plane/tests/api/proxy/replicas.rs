//! The scale-out topology on one PostgreSQL: two control planes and three proxies, two
//! following the first control plane and one the second (as proxies behind a Service
//! land on either). Each promise that spans replicas, as a test, with its figure
//! printed.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use warden_control_plane::config::Secret;

use super::balancer::Balancer;
use super::read_your_writes::changes_are_in_force_when_answered;
use super::{eventually, simple_chat, MockProvider, TestProxy};
use crate::helpers::{create_policy, Backend, TestApp};

struct Topology {
    planes: [TestApp; 2],
    proxies: [TestProxy; 3],
    _provider: MockProvider,
}

async fn topology() -> Topology {
    // A database of their own: writes wait for every proxy connected to it, and the
    // other tests' replicas come and go.
    let one = TestApp::spawn_alone(Backend::Postgres, |_| {}).await;
    let two = TestApp::spawn_with(Backend::Postgres, |config| {
        config.database_url = Secret::new(one.database_url());
    })
    .await;
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

/// The address a proxy listens on.
fn addr_of(proxy: &TestProxy) -> std::net::SocketAddr {
    proxy.base.trim_start_matches("http://").parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_the_proxies_under_load_fails_no_request() {
    let app = TestApp::spawn_with(Backend::Postgres, |_| {}).await;
    let provider = MockProvider::start().await;
    let start = || {
        TestProxy::start_with(&app, &provider, |config| {
            config.shutdown_delay_ms = 500;
        })
    };
    let mut proxies = vec![start().await, start().await, start().await];
    let balancer = Balancer::start(proxies.iter().map(addr_of).collect()).await;
    let (tenant, key, _) = proxies[0]
        .tenant_with_key(&app, json!({ "developer_label": "rolling" }))
        .await;
    for proxy in &proxies[1..] {
        assert_eq!(proxy.chat_answer(&key, "gpt-4o-mini").await.0, 200);
    }
    let warmed = 2;

    // Agents through the balancer: quick requests on three lanes and streams of about
    // 2.5 s on a fourth, a new connection each (as the balancer sees them).
    let served = Arc::new(AtomicI64::new(0));
    let failed = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut lanes = tokio::task::JoinSet::new();
    for lane in 0..4 {
        let (served, failed, stop) = (served.clone(), failed.clone(), stop.clone());
        let (url, key) = (
            format!("http://{}/v1/chat/completions", balancer.addr),
            key.clone(),
        );
        lanes.spawn(async move {
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap();
            while !stop.load(Ordering::Relaxed) {
                let mut body = simple_chat("gpt-4o-mini");
                if lane == 3 {
                    body["stream"] = json!(true);
                    body["stream_options"] = json!({ "include_usage": true });
                    body["user"] = json!("mock-slow-stream");
                }
                let answer = client.post(&url).bearer_auth(&key).json(&body).send().await;
                let whole = match answer {
                    Ok(answer) if answer.status() == 200 => {
                        let text = answer.text().await.unwrap_or_default();
                        lane != 3 || text.trim_end().ends_with("data: [DONE]")
                    }
                    _ => false,
                };
                match whole {
                    true => served.fetch_add(1, Ordering::Relaxed),
                    false => {
                        failed.lock().unwrap().push(lane);
                        0
                    }
                };
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    }
    eventually(Duration::from_secs(5), || async {
        (served.load(Ordering::Relaxed) >= 20).then_some(())
    })
    .await;

    // One at a time: SIGTERM, not ready at once (the balancer's view), drained and
    // gone, a new one in its place.
    let probe = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    for proxy in proxies.iter_mut() {
        let old = addr_of(proxy);
        proxy.signal_stop();
        // The signal is handled on the proxy's own task, a moment later on a busy
        // machine; within its 500 ms delay it answers, not ready, on the open listener.
        eventually(Duration::from_millis(400), || async {
            let ready = probe
                .get(format!("http://{old}/readyz"))
                .send()
                .await
                .expect("the listener is still open");
            (ready.status() == 503).then_some(())
        })
        .await;
        // The balancer takes it out once it sees it not ready.
        balancer.replace(old, None);
        proxy.stop().await;
        let fresh = start().await;
        balancer.replace(old, Some(addr_of(&fresh)));
        *proxy = fresh;
        let before = served.load(Ordering::Relaxed);
        eventually(Duration::from_secs(5), || async {
            (served.load(Ordering::Relaxed) >= before + 10).then_some(())
        })
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    while let Some(done) = lanes.join_next().await {
        done.unwrap();
    }
    let served = served.load(Ordering::Relaxed);
    let failed = failed.lock().unwrap().clone();
    println!(
        "rolling restart of three proxies: {served} requests served, {} failed",
        failed.len()
    );
    assert!(failed.is_empty(), "requests failed on lanes {failed:?}");

    // Usage is exact: every request served, once.
    let expected = served + warmed;
    eventually(Duration::from_secs(30), || async {
        (app.count_rows("usage_records", &tenant.id).await == expected).then_some(())
    })
    .await;
    for mut proxy in proxies {
        proxy.stop().await;
    }
    assert_eq!(app.count_rows("usage_records", &tenant.id).await, expected);
}

/// Budgets across proxies: each proxy admits a request only within the money the
/// control plane granted it, and grants never take the ledger's spend plus every
/// proxy's allowance past the threshold, so 60 concurrent requests over three proxies
/// against room for a few spend at most the limit (requests with `max_tokens` and plain
/// text cost no more than their estimates). What the proxies hold unused goes back once
/// idle. Printed for deploy/README.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_served_by_three_proxies_overshoots_at_most_the_documented_bound() {
    let t = topology().await;
    let [one, _] = &t.planes;
    let limit_micros = 1_000;
    let (tenant, raw, _) = t.proxies[0]
        .tenant_with_key(
            one,
            json!({ "developer_label": "shared-budget", "budget_limit_usd": 0.001 }),
        )
        .await;
    let small = json!({ "model": "gpt-4o", "max_tokens": 10,
                        "messages": [{ "role": "user", "content": "Say hello" }] });
    let answers = futures_util::future::join_all((0..60).map(|i| {
        let (proxy, body, raw) = (&t.proxies[i % 3], small.clone(), raw.clone());
        async move { proxy.chat(&raw, body).await.status().as_u16() }
    }))
    .await;
    assert!(
        answers.iter().all(|s| *s == 200 || *s == 402),
        "{answers:?}"
    );
    let served = answers.iter().filter(|s| **s == 200).count() as i64;
    let spent = eventually(Duration::from_secs(10), || async {
        let by_agent = one.get("/cost/by-agent", &tenant.admin_key).await;
        let by_agent = crate::helpers::expect_status(by_agent, 200).await;
        let spent: i64 = by_agent["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| (row["total_cost_usd"].as_f64().unwrap() * 1e6).round() as i64)
            .sum();
        (spent >= served * 97).then_some(spent)
    })
    .await;
    println!(
        "budget of {limit_micros} µ$ over three proxies, 60 concurrent requests: {served} \
         served, {spent} µ$ spent, overshoot {} µ$ ({:.1}x the limit)",
        (spent - limit_micros).max(0),
        spent as f64 / limit_micros as f64
    );
    assert!(spent <= limit_micros, "spent {spent} µ$ of {limit_micros}");
    assert!(served >= 1, "nothing served: {answers:?}");
    // Idle for five seconds (by the planes' manual clocks, which the proxies follow),
    // the allowances go back: nothing is held for the tenant.
    for plane in &t.planes {
        plane.clock.advance(6_000);
    }
    eventually(Duration::from_secs(15), || async {
        let held = one.count_rows("budget_grants", &tenant.id).await;
        (held == 0).then_some(())
    })
    .await;
}
