//! `POST /internal/v1/budget-grants`: budgets' money shared by the proxies. Grants never
//! take a scope's ledger spend plus every live holding past the block threshold.

use serde_json::{json, Value};
use warden_shared::timestamp::Timestamp;

use crate::helpers::{expect_error, expect_status, TestApp, SERVICE_TOKEN};

async fn ask(app: &TestApp, token: &str, body: &Value) -> reqwest::Response {
    app.post_internal("budget-grants", token, body).await
}

fn month(app: &TestApp) -> i64 {
    app.clock.now().month_start()
}

/// One holder's ask in the tenant scope with a block threshold of 10,000 µ$; returns
/// (granted, held, committed).
async fn grant(app: &TestApp, tenant: &str, holder: &str, need: i64, release: i64) -> [i64; 3] {
    let body = json!({ "holder": holder, "month": month(app), "scopes": [{
        "tenant_id": tenant, "scope": "tenant", "block_micros": 10_000,
        "need_micros": need, "release_micros": release }] });
    let answer = expect_status(ask(app, SERVICE_TOKEN, &body).await, 200).await;
    let scope = &answer["data"]["scopes"][0];
    assert_eq!(scope["scope"], json!("tenant"), "{answer}");
    ["granted_micros", "held_micros", "committed_micros"].map(|f| scope[f].as_i64().unwrap())
}

db_test!(grants_never_pass_the_threshold_across_holders, |app| {
    let tenant = app.new_tenant("starter").await;
    let id = tenant.id.as_str();
    // An eighth of the room, or the need when it is more; nothing when it does not fit.
    assert_eq!(
        grant(&app, id, "ins_a", 100, 0).await,
        [1_250, 1_250, 1_250]
    );
    assert_eq!(grant(&app, id, "ins_b", 9_000, 0).await, [0, 0, 1_250]);
    assert_eq!(
        grant(&app, id, "ins_b", 8_000, 0).await,
        [8_000, 8_000, 9_250]
    );
    assert_eq!(grant(&app, id, "ins_a", 600, 0).await, [600, 1_850, 9_850]);
    assert_eq!(grant(&app, id, "ins_c", 151, 0).await, [0, 0, 9_850]);
    // Given back, the room is another's.
    assert_eq!(grant(&app, id, "ins_a", 0, 1_850).await, [0, 0, 8_000]);
    assert_eq!(
        grant(&app, id, "ins_c", 2_000, 0).await,
        [2_000, 2_000, 10_000]
    );
    assert_eq!(app.count_rows("budget_grants", id).await, 2);
    // A holding not renewed for a minute has lapsed: its room is free again.
    app.clock.advance(61_000);
    assert_eq!(
        grant(&app, id, "ins_a", 5_000, 0).await,
        [5_000, 5_000, 5_000]
    );
});

db_test!(the_ledgers_spend_counts_against_the_room, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = tenant.admin_key.clone();
    let agent = app.register_agent(&key, json!({ "name": "spender" })).await;
    // A tenant-wide budget makes the ledger keep the tenant scope's spend.
    expect_status(
        app.post("/budget/limits", &key, json!({ "monthly_limit_usd": 100 }))
            .await,
        201,
    )
    .await;
    let now = app.clock.now();
    let batch = json!({ "batch_id": "spend-1", "records": [{
        "record_id": "r1", "tenant_id": tenant.id, "agent_id": agent["id"],
        "model_provider": "openai", "model_name": "gpt-4o", "request_type": "chat.completions",
        "input_tokens": 100, "output_tokens": 10, "cost_usd": 0.004,
        "recorded_at": Timestamp::from_millis(now.as_millis()).to_string() }] });
    let ingested = app
        .client
        .post(format!("{}/internal/v1/usage-batches", app.base))
        .bearer_auth(SERVICE_TOKEN)
        .json(&batch)
        .send()
        .await
        .unwrap();
    let ack = expect_status(ingested, 200).await;
    assert_eq!(ack["data"]["accepted"], json!(1), "{ack}");
    // 4,000 µ$ spent of 10,000: 6,000 of room.
    assert_eq!(
        grant(&app, &tenant.id, "ins_a", 6_001, 0).await,
        [0, 0, 4_000]
    );
    assert_eq!(
        grant(&app, &tenant.id, "ins_a", 6_000, 0).await,
        [6_000, 6_000, 10_000]
    );
});

db_test!(an_unknown_tenant_gets_nothing_and_no_row, |app| {
    assert_eq!(grant(&app, "ten_gone", "ins_a", 100, 0).await, [0, 0, 0]);
    assert_eq!(app.count_rows("budget_grants", "ten_gone").await, 0);
});

db_test!(bad_asks_are_refused_whole, |app| {
    let tenant = app.new_tenant("starter").await;
    let scope = |scope: &str, need: i64| {
        json!({ "tenant_id": tenant.id, "scope": scope, "block_micros": 10_000,
                "need_micros": need, "release_micros": 0 })
    };
    let m = month(&app);
    let bad = [
        json!({ "holder": "", "month": m, "scopes": [scope("tenant", 1)] }),
        json!({ "holder": "ins_a", "month": -1, "scopes": [scope("tenant", 1)] }),
        json!({ "holder": "ins_a", "month": m, "scopes": [] }),
        json!({ "holder": "ins_a", "month": m, "scopes": [scope("team:", 1)] }),
        json!({ "holder": "ins_a", "month": m, "scopes": [scope("everyone", 1)] }),
        json!({ "holder": "ins_a", "month": m, "scopes": [scope("tenant", -1)] }),
        json!({ "holder": "ins_a", "month": m, "scopes": (0..501).map(|i| scope(&format!("agent:{i}"), 1)).collect::<Vec<_>>() }),
    ];
    for body in bad {
        let answer = expect_error(
            ask(&app, SERVICE_TOKEN, &body).await,
            422,
            "validation_failed",
        )
        .await;
        assert!(answer["error"]["message"].is_string());
    }
    let unknown_field =
        json!({ "holder": "ins_a", "month": m, "scopes": [scope("tenant", 1)], "extra": 1 });
    expect_error(
        ask(&app, SERVICE_TOKEN, &unknown_field).await,
        422,
        "validation_failed",
    )
    .await;
    // Nothing was written by any of them; a tenant's key is not the service token.
    assert_eq!(app.count_rows("budget_grants", &tenant.id).await, 0);
    let good = json!({ "holder": "ins_a", "month": m, "scopes": [scope("tenant", 1)] });
    let refused = ask(&app, &tenant.admin_key, &good).await;
    assert_eq!(refused.status(), 401);
    assert_eq!(app.count_rows("budget_grants", &tenant.id).await, 0);
});

db_test!(
    concurrent_asks_from_many_holders_never_pass_the_threshold,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let asks = (0..40).map(|i| {
            let (app, id) = (&app, tenant.id.clone());
            async move { grant(app, &id, &format!("ins_{i}"), 1_000, 0).await[0] }
        });
        let granted: Vec<i64> = futures_util::future::join_all(asks).await;
        let total: i64 = granted.iter().sum();
        assert!(total <= 10_000, "granted {total} of 10,000: {granted:?}");
        // Every ask that fitted got at least its need: the room is used, not lost.
        assert!(total > 10_000 - 1_000, "granted only {total}: {granted:?}");
    }
);
