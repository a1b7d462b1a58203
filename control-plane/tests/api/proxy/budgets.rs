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
        // Once the ledger has it, the spend stream carries it to the second proxy within a
        // second: its very first request for the key is refused.
        eventually(Duration::from_secs(5), || async {
            let spent = ledger_spend(&app, &tenant.admin_key).await;
            (spent >= served * 97).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let answer = second.chat(&raw, small_request()).await;
        assert_eq!(answer.status(), 402);
    }
);
