//! `POST /internal/v1/rate-grant-batches`: a proxy's asks ahead for many buckets in one
//! transaction, granted as single asks are (never past a limit), in the order asked; a
//! bad ask refuses the whole batch and writes nothing.

use serde_json::{json, Value};

use crate::helpers::{expect_error, expect_status, TestApp, SERVICE_TOKEN};

async fn ask(app: &TestApp, token: &str, body: &Value) -> reqwest::Response {
    app.client
        .post(format!("{}/internal/v1/rate-grant-batches", app.base))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .unwrap()
}

fn grant(tenant: &str, bucket: &str, limit: i64, want: i64) -> Value {
    json!({ "tenant_id": tenant, "limiter": "policy:1", "bucket": bucket, "minute": 29_000_000,
            "limit": limit, "want": want })
}

db_test!(a_batch_is_granted_in_order_and_never_past_a_limit, |app| {
    let tenant = app.new_tenant("starter").await;
    let id = tenant.id.as_str();
    let batch = json!({ "grants": [
        grant(id, "key_a", 80, 5),
        grant(id, "key_b", 80, 50),
        grant(id, "key_a", 80, 50),
        grant("ten_gone", "key_a", 80, 5),
    ] });
    let answer = expect_status(ask(&app, SERVICE_TOKEN, &batch).await, 200).await;
    // A first grant is at most an eighth of the limit (and what is wanted), a later one
    // an eighth of what is left; a deleted tenant gets nothing.
    let granted: Vec<i64> = answer["data"]["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["granted"].as_i64().unwrap())
        .collect();
    assert_eq!(granted, [5, 10, 9, 0], "{answer}");
});

db_test!(bad_batches_are_refused_whole, |app| {
    let tenant = app.new_tenant("starter").await;
    let id = tenant.id.as_str();
    let rows = || app.count_rows("rate_grants", id);
    expect_error(
        ask(&app, SERVICE_TOKEN, &json!({ "grants": [] })).await,
        422,
        "validation_failed",
    )
    .await;
    let bad = json!({ "grants": [grant(id, "key_a", 80, 5), grant(id, "key_b", 80, 0)] });
    let refused = expect_error(
        ask(&app, SERVICE_TOKEN, &bad).await,
        422,
        "validation_failed",
    )
    .await;
    assert_eq!(
        refused["error"]["details"]["field"],
        json!("grants[1].want")
    );
    assert_eq!(rows().await, 0, "nothing of a refused batch is written");
    let many: Vec<Value> = (0..1001)
        .map(|n| grant(id, &format!("k{n}"), 80, 1))
        .collect();
    expect_error(
        ask(&app, SERVICE_TOKEN, &json!({ "grants": many })).await,
        422,
        "validation_failed",
    )
    .await;
    let good = json!({ "grants": [grant(id, "key_a", 80, 5)] });
    expect_error(
        ask(&app, &tenant.admin_key, &good).await,
        401,
        "invalid_credentials",
    )
    .await;
    assert_eq!(rows().await, 0);
});
