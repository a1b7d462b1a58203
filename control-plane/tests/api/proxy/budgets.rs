//! Proxy keys' monthly `budget_limit_usd`, enforced by the proxies from the ledger's
//! spend and their own reservations.

use std::time::Duration;

use serde_json::{json, Value};

use super::{eventually, MockProvider, TestProxy};
use crate::helpers::{expect_status, TestApp};

/// A gpt-4o request the mock answers with 11 input and 7 output tokens: 97.5 µ$ real,
/// a little more estimated (the body's bytes and `max_tokens`).
fn small_request() -> Value {
    json!({ "model": "gpt-4o", "max_tokens": 10,
            "messages": [{ "role": "user", "content": "Say hello" }] })
}

/// The key's spend as the ledger has it, in micro-dollars.
async fn ledger_spend(app: &TestApp, admin_key: &str) -> i64 {
    let by_agent = expect_status(app.get("/cost/by-agent", admin_key).await, 200).await;
    by_agent["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| (row["total_cost_usd"].as_f64().unwrap() * 1e6).round() as i64)
        .sum()
}

db_test!(
    a_keys_budget_holds_under_concurrency_and_across_proxies,
    |app| {
        let provider = MockProvider::start().await;
        let first = TestProxy::start(&app, &provider).await;
        let limit_micros = 1_000;
        let (tenant, raw, _) = first
            .tenant_with_key(
                &app,
                json!({ "developer_label": "budgeted", "budget_limit_usd": 0.001 }),
            )
            .await;

        // 24 requests at once against room for a handful: reservations let through only
        // what fits, so the key never goes over, whatever the interleaving.
        let answers =
            futures_util::future::join_all((0..24).map(|_| first.chat(&raw, small_request())))
                .await;
        let mut served = 0;
        for answer in answers {
            match answer.status().as_u16() {
                200 => served += 1,
                402 => {
                    let body: Value = answer.json().await.unwrap();
                    assert_eq!(body["error"]["code"], json!("budget_exceeded"), "{body}");
                    assert_eq!(body["error"]["type"], json!("insufficient_quota"));
                }
                other => panic!("unexpected status {other}"),
            }
        }
        assert!((1..24).contains(&served), "served {served}");
        // Everything served reaches the ledger, and stays within the limit.
        let spent = eventually(Duration::from_secs(5), || async {
            let spent = ledger_spend(&app, &tenant.admin_key).await;
            (spent == served * 98 || spent == served * 97).then_some(spent)
        })
        .await;
        assert!(spent <= limit_micros, "spent {spent} of {limit_micros}");

        // Sequential requests use up the rest, then stop.
        let mut refused = false;
        for _ in 0..20 {
            if first.chat(&raw, small_request()).await.status() == 402 {
                refused = true;
                break;
            }
        }
        assert!(refused, "the budget never ran out");
        let spent = eventually(Duration::from_secs(5), || async {
            let spent = ledger_spend(&app, &tenant.admin_key).await;
            (spent > limit_micros - 200).then_some(spent)
        })
        .await;
        assert!(spent <= limit_micros, "spent {spent} of {limit_micros}");

        // A proxy started now learns the spend from the control plane and refuses too.
        let second = TestProxy::start(&app, &provider).await;
        let answer = second.chat(&raw, small_request()).await;
        assert_eq!(answer.status(), 402);

        // A key without a budget of the same tenant's kind is not limited by it.
        let (_, unlimited, _) = first
            .tenant_with_key(&app, json!({ "developer_label": "unlimited" }))
            .await;
        for _ in 0..3 {
            assert_eq!(first.chat(&unlimited, small_request()).await.status(), 200);
        }
    }
);

db_test!(
    a_budget_counts_spend_through_other_proxies_within_seconds,
    |app| {
        // Two proxies share a key: what one spends reaches the other through the ledger
        // and the control plane's spend stream.
        let provider = MockProvider::start().await;
        let first = TestProxy::start(&app, &provider).await;
        let second = TestProxy::start(&app, &provider).await;
        let (tenant, raw, _) = first
            .tenant_with_key(
                &app,
                json!({ "developer_label": "shared", "budget_limit_usd": 0.0005 }),
            )
            .await;
        let mut served = 0;
        while first.chat(&raw, small_request()).await.status() == 200 {
            served += 1;
            assert!(served < 20, "the budget never ran out");
        }
        assert!(served >= 2, "served {served}");
        // Once the ledger has it, the spend stream carries it to the second proxy (sent
        // every second), which then refuses the key although it served none of its
        // requests. Polled rather than slept on: the suite shares two cores.
        eventually(Duration::from_secs(5), || async {
            let spent = ledger_spend(&app, &tenant.admin_key).await;
            (spent >= served * 97).then_some(())
        })
        .await;
        eventually(Duration::from_secs(10), || async {
            (second.chat(&raw, small_request()).await.status() == 402).then_some(())
        })
        .await;
    }
);

/// 64 concurrent requests spread over `proxies`; returns how many were served.
async fn burst(proxies: &[&TestProxy], raw: &str) -> i64 {
    let answers = futures_util::future::join_all((0..64).map(|i| async move {
        let proxy = proxies[i % proxies.len()];
        proxy.chat(raw, small_request()).await.status().as_u16()
    }))
    .await;
    assert!(
        answers.iter().all(|s| *s == 200 || *s == 402),
        "{answers:?}"
    );
    answers.iter().filter(|s| **s == 200).count() as i64
}

/// Creates a budget limit: in force on the proxies, with its scope's spend, when the
/// call returns.
pub(super) async fn create_limit(app: &TestApp, admin_key: &str, body: Value) -> String {
    let created = expect_status(app.post("/budget/limits", admin_key, body).await, 201).await;
    created["data"]["id"].as_str().unwrap().to_owned()
}

db_test!(a_budget_limit_warns_then_blocks_through_the_proxy, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (tenant, raw, key) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "agent" }))
        .await;
    let agent_id = key["agent_id"].as_str().unwrap();
    let limit_id = create_limit(
        &app,
        &tenant.admin_key,
        json!({ "agent_id": agent_id, "monthly_limit_usd": 0.001, "warn_threshold_pct": 50 }),
    )
    .await;

    // Requests pass, those past half the budget with a warning header, until the next
    // estimate no longer fits: then 402, in OpenAI's shape, naming the limit.
    let mut warned = 0;
    let mut served = 0;
    let refusal = loop {
        let answer = proxy.chat(&raw, small_request()).await;
        if answer.status() == 402 {
            break answer.json::<Value>().await.unwrap();
        }
        assert_eq!(answer.status(), 200);
        served += 1;
        assert!(served < 20, "the budget never ran out");
        if let Some(warning) = answer.headers().get("x-warden-budget-warning") {
            let warning = warning.to_str().unwrap();
            assert!(
                warning.starts_with(&format!("agent:{agent_id}=")),
                "{warning}"
            );
            warned += 1;
        }
    };
    assert!(
        served >= 3 && warned >= 1 && warned < served,
        "served {served}, warned {warned}"
    );
    assert_eq!(
        refusal["error"]["code"],
        json!("budget_exceeded"),
        "{refusal}"
    );
    assert_eq!(refusal["error"]["type"], json!("insufficient_quota"));
    assert!(
        refusal["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&limit_id),
        "{refusal}"
    );

    // The ledger has every served request; the status shows it; the warning crossing
    // was recorded once.
    let spent = eventually(Duration::from_secs(5), || async {
        let spent = ledger_spend(&app, &tenant.admin_key).await;
        (spent >= served * 97).then_some(spent)
    })
    .await;
    assert!(spent <= 1_000, "spent {spent}");
    let status = expect_status(app.get("/budget/status", &tenant.admin_key).await, 200).await;
    let scope = &status["data"]["scopes"][0];
    assert_eq!(scope["scope"], json!(format!("agent:{agent_id}")));
    assert_eq!(
        (scope["current_spend_usd"].as_f64().unwrap() * 1e6).round() as i64,
        spent
    );
    // The ledger records the crossing of what was spent (500 of the 1,000 micro-dollars);
    // the proxy warns on its own view, which counts the estimates of requests in flight,
    // so the last warned requests can leave the spend just short of it.
    let events = app.audit_events(&tenant.id, &limit_id).await;
    assert_eq!(
        events
            .iter()
            .filter(|e| *e == "budget.warn_threshold_reached")
            .count(),
        usize::from(spent >= 500),
        "spent {spent}: {events:?}"
    );

    // Disabled, the limit stops blocking within a second.
    expect_status(
        app.patch(
            &format!("/budget/limits/{limit_id}"),
            &tenant.admin_key,
            json!({ "enabled": false }),
        )
        .await,
        200,
    )
    .await;
    eventually(Duration::from_secs(3), || async {
        (proxy.chat(&raw, small_request()).await.status() == 200).then_some(())
    })
    .await;
});

db_test!(
    sixty_four_concurrent_requests_do_not_overshoot_a_nearly_spent_budget,
    |app| {
        // Room for three estimates (about 150 µ$ each; each really costs 97.5 µ$) after
        // 1,500 µ$ of a 2,000 µ$ tenant budget already spent.
        let provider = MockProvider::start().await;
        let first = TestProxy::start(&app, &provider).await;
        let second = TestProxy::start(&app, &provider).await;
        let limit_micros = 2_000;
        for proxies in [vec![&first], vec![&first, &second]] {
            let (tenant, raw, key) = first
                .tenant_with_key(&app, json!({ "developer_label": "burst" }))
                .await;
            expect_status(
                app.post(
                    "/telemetry/usage",
                    &tenant.admin_key,
                    json!({ "agent_id": key["agent_id"], "model_provider": "openai",
                        "model_name": "gpt-4o", "input_tokens": 1, "output_tokens": 1,
                        "cost_usd": 0.0015 }),
                )
                .await,
                201,
            )
            .await;
            // The limit reaches the proxies with the spend already made, when it returns.
            create_limit(
                &app,
                &tenant.admin_key,
                json!({ "monthly_limit_usd": 0.002 }),
            )
            .await;
            let replicas = proxies.len() as i64;
            let served = burst(&proxies, &raw).await;
            // One proxy admits only what fits: three estimates at once, up to five as
            // finished requests' real (smaller) costs replace their estimates. N proxies
            // each admit what fits by their own count before they hear of the others'.
            assert!(
                (1..=5 * replicas).contains(&served),
                "served {served} through {replicas}"
            );
            let spent = eventually(Duration::from_secs(5), || async {
                let spent = ledger_spend(&app, &tenant.admin_key).await;
                (spent >= 1_500 + served * 97).then_some(spent)
            })
            .await;
            // The documented bound: the threshold, plus for N proxies (N - 1) times the
            // headroom each saw (500 µ$).
            let bound = limit_micros + (replicas - 1) * 500;
            assert!(
                spent <= bound,
                "spent {spent} > {bound} through {replicas} proxies"
            );
        }
    }
);

db_test!(a_budget_limit_policy_blocks_on_the_scopes_spend, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (tenant, raw, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "policy" }))
        .await;
    let policy = expect_status(
        app.post(
            "/policies",
            &tenant.admin_key,
            json!({ "name": "monthly guard", "policy_type": "budget_limit",
                    "config": { "monthly_limit_usd": 0.0006 } }),
        )
        .await,
        201,
    )
    .await;
    let policy_id = policy["data"]["id"].as_i64().unwrap();
    let mut served = 0;
    let refusal = loop {
        let answer = proxy.chat(&raw, small_request()).await;
        if answer.status() != 200 {
            assert_eq!(answer.status(), 402);
            break answer.json::<Value>().await.unwrap();
        }
        served += 1;
        assert!(served < 20, "the policy's budget never ran out");
    };
    assert!(served >= 2, "served {served}");
    assert_eq!(
        refusal["error"]["code"],
        json!("budget_exceeded"),
        "{refusal}"
    );
    assert!(
        refusal["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("policy {policy_id}")),
        "{refusal}"
    );
    let spent = eventually(Duration::from_secs(5), || async {
        let spent = ledger_spend(&app, &tenant.admin_key).await;
        (spent >= served * 97).then_some(spent)
    })
    .await;
    assert!(spent <= 600, "spent {spent}");
    // The dry run sees the same spend: a request estimated to reach the limit exactly
    // passes, one a micro-dollar dearer fails.
    let agent_id = first_agent(&app, &tenant).await;
    for (extra, verdict) in [(0, "pass"), (1, "fail")] {
        let estimate = (600 - spent + extra) as f64 / 1e6;
        let dry = expect_status(
            app.post(
                "/policies/evaluate",
                &tenant.admin_key,
                json!({ "agent_id": agent_id, "provider": "openai", "model": "gpt-4o",
                        "estimated_cost_usd": estimate }),
            )
            .await,
            200,
        )
        .await;
        let result = dry["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["policy_id"] == json!(policy_id))
            .cloned()
            .unwrap();
        assert_eq!(result["result"], json!(verdict), "spent {spent}: {dry}");
    }
});

async fn first_agent(app: &TestApp, tenant: &crate::helpers::TestTenant) -> String {
    let agents = expect_status(app.get("/agents", &tenant.admin_key).await, 200).await;
    agents["data"][0]["id"].as_str().unwrap().to_owned()
}

db_test!(
    a_request_a_budget_refuses_does_not_use_up_a_rate_limit,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, raw, key) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "both" }))
            .await;
        expect_status(
            app.post(
                "/policies",
                &tenant.admin_key,
                json!({ "name": "two a minute", "policy_type": "rate_limit",
                    "config": { "requests_per_minute": 2, "per": "key" } }),
            )
            .await,
            201,
        )
        .await;
        // Room for one request.
        let limit_id = create_limit(
            &app,
            &tenant.admin_key,
            json!({ "agent_id": key["agent_id"], "monthly_limit_usd": 0.0002 }),
        )
        .await;
        // The whole exchange falls within one rate window: the test's clock stands still.
        assert_eq!(proxy.chat(&raw, small_request()).await.status(), 200);
        for _ in 0..3 {
            assert_eq!(proxy.chat(&raw, small_request()).await.status(), 402);
        }
        expect_status(
            app.patch(
                &format!("/budget/limits/{limit_id}"),
                &tenant.admin_key,
                json!({ "monthly_limit_usd": 10 }),
            )
            .await,
            200,
        )
        .await;
        // The three refused requests counted nothing: the second of two passes, a third not.
        assert_eq!(proxy.chat(&raw, small_request()).await.status(), 200);
        assert_eq!(proxy.chat(&raw, small_request()).await.status(), 429);
    }
);

/// Both proxies answer a small request with `status` at once.
async fn both_answer(proxies: [&TestProxy; 2], raw: &str, status: u16, when: &str) {
    for (index, proxy) in proxies.iter().enumerate() {
        let response = proxy.chat(raw, small_request()).await;
        let code = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or_default();
        assert_eq!(code, status, "proxy {index}, {when}: {body}");
        if status == 402 {
            assert_eq!(body["error"]["code"], json!("budget_exceeded"), "{body}");
        }
    }
}

db_test!(
    a_new_limit_holds_against_the_spend_already_made_when_its_call_returns,
    |app| {
        let provider = MockProvider::start().await;
        let first = TestProxy::start(&app, &provider).await;
        let second = TestProxy::start(&app, &provider).await;
        let (tenant, raw, _) = first
            .tenant_with_key(&app, json!({ "developer_label": "spender" }))
            .await;
        let admin = tenant.admin_key.clone();
        eventually(Duration::from_secs(3), || async {
            let listed = second
                .client
                .get(format!("{}/v1/models", second.base))
                .bearer_auth(&raw);
            (listed.send().await.unwrap().status() == 200).then_some(())
        })
        .await;
        for _ in 0..5 {
            assert_eq!(first.chat(&raw, small_request()).await.status(), 200);
        }
        let settled = |requests: i64| {
            let (app, admin) = (&app, &admin);
            async move {
                eventually(Duration::from_secs(10), || async {
                    let summary = expect_status(app.get("/cost/summary", admin).await, 200).await;
                    (summary["data"]["total_requests"] == json!(requests))
                        .then(|| ledger_spend(app, admin))
                })
                .await
                .await
            }
        };
        let spent = settled(5).await;
        assert!(spent > 0);

        // A limit equal to the month's spend: reached already, on every proxy at once.
        let limit_usd = spent as f64 / 1e6;
        let created = app
            .post(
                "/budget/limits",
                &admin,
                json!({ "monthly_limit_usd": limit_usd }),
            )
            .await;
        assert_eq!(created.headers()["warden-enforcement"], "applied");
        let limit = expect_status(created, 201).await["data"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        both_answer([&first, &second], &raw, 402, "a limit at the spend").await;

        // Raised: both pass at once.
        let raised = app
            .patch(
                &format!("/budget/limits/{limit}"),
                &admin,
                json!({ "monthly_limit_usd": limit_usd * 1000.0 }),
            )
            .await;
        assert_eq!(raised.headers()["warden-enforcement"], "applied");
        expect_status(raised, 200).await;
        both_answer([&first, &second], &raw, 200, "a raised limit").await;

        // A `budget_limit` policy below the spend takes the same path.
        expect_status(
            app.delete(&format!("/budget/limits/{limit}"), &admin).await,
            204,
        )
        .await;
        let spent = settled(7).await;
        let policy = app
            .post(
                "/policies",
                &admin,
                json!({ "name": "spent already", "policy_type": "budget_limit",
                        "config": { "monthly_limit_usd": spent as f64 / 2e6 } }),
            )
            .await;
        assert_eq!(policy.headers()["warden-enforcement"], "applied");
        expect_status(policy, 201).await;
        both_answer(
            [&first, &second],
            &raw,
            402,
            "a budget_limit policy below the spend",
        )
        .await;
    }
);
