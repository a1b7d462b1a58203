//! `POST /internal/v1/rate-grants`: rate limits' allowances shared by the proxies, asked
//! in batches. Grants of a bucket and minute never sum past the limit.

use serde_json::{json, Value};

use crate::helpers::{expect_error, expect_status, TestApp, SERVICE_TOKEN};

async fn ask(app: &TestApp, token: &str, body: &Value) -> reqwest::Response {
    app.post_internal("rate-grants", token, body).await
}

fn minute(app: &TestApp) -> i64 {
    app.clock.now().as_millis() / 60_000
}

/// An ask of policy 1's `bucket` with a limit of 80 a minute.
fn ask_of(tenant: &str, bucket: &str, minute: i64) -> Value {
    json!({ "tenant_id": tenant, "limiter": "policy:1", "bucket": bucket, "minute": minute,
            "limit": 80, "want": 80 })
}

/// The grants of a batch, in its order.
async fn grants(app: &TestApp, asks: Vec<Value>) -> Vec<i64> {
    let answer = expect_status(ask(app, SERVICE_TOKEN, &json!({ "asks": asks })).await, 200).await;
    answer["data"]["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["granted"].as_i64().unwrap())
        .collect()
}

db_test!(a_batch_is_granted_in_order_and_never_past_a_limit, |app| {
    let tenant = app.new_tenant("starter").await;
    let (id, m) = (tenant.id.as_str(), minute(&app));
    // An eighth of what is left each time, at least one, per bucket; the same bucket
    // twice in one batch is asked twice.
    assert_eq!(
        grants(
            &app,
            vec![
                ask_of(id, "agt_b", m),
                ask_of(id, "agt_a", m),
                ask_of(id, "agt_b", m)
            ]
        )
        .await,
        [10, 10, 8]
    );
    let mut total = 18;
    for _ in 0..60 {
        total += grants(&app, vec![ask_of(id, "agt_b", m)]).await[0];
    }
    assert_eq!(total, 80, "agt_b was granted {total} of 80");
    assert_eq!(grants(&app, vec![ask_of(id, "agt_b", m)]).await, [0]);
    // Another minute is a limit of its own.
    assert_eq!(grants(&app, vec![ask_of(id, "agt_b", m + 1)]).await, [10]);
    // A tenant that is gone gets nothing and no row, beside one that gets its grant.
    assert_eq!(
        grants(
            &app,
            vec![ask_of("ten_gone", "agt_a", m), ask_of(id, "agt_c", m)]
        )
        .await,
        [0, 10]
    );
    assert_eq!(app.count_rows("rate_grants", "ten_gone").await, 0);
});

db_test!(bad_asks_are_refused_whole, |app| {
    let tenant = app.new_tenant("starter").await;
    let (id, m) = (tenant.id.as_str(), minute(&app));
    let with = |field: &str, value: Value| {
        let mut bad = ask_of(id, "agt_a", m);
        bad[field] = value;
        json!({ "asks": [ask_of(id, "agt_z", m), bad] })
    };
    let bad = [
        (json!({ "asks": [] }), "asks"),
        (
            json!({ "asks": (0..501).map(|i| ask_of(id, &format!("agt_{i}"), m)).collect::<Vec<_>>() }),
            "asks",
        ),
        (with("limiter", json!("")), "asks[1].limiter"),
        (with("bucket", json!("b".repeat(201))), "asks[1].bucket"),
        (with("limit", json!(0)), "asks[1].limit"),
        (with("want", json!(10_001)), "asks[1].want"),
        (with("minute", json!(-1)), "asks[1].minute"),
    ];
    for (body, field) in bad {
        let answer = expect_error(
            ask(&app, SERVICE_TOKEN, &body).await,
            422,
            "validation_failed",
        )
        .await;
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(field),
            "{field}: {answer}"
        );
    }
    let unknown_field = json!({ "asks": [ask_of(id, "agt_z", m)], "extra": 1 });
    expect_error(
        ask(&app, SERVICE_TOKEN, &unknown_field).await,
        422,
        "validation_failed",
    )
    .await;
    // The asks beside the bad ones were not granted; a tenant's key is not the service
    // token.
    assert_eq!(app.count_rows("rate_grants", id).await, 0);
    let good = json!({ "asks": [ask_of(id, "agt_z", m)] });
    assert_eq!(ask(&app, &tenant.admin_key, &good).await.status(), 401);
    assert_eq!(app.count_rows("rate_grants", id).await, 0);
});

db_test!(
    concurrent_batches_over_the_same_buckets_never_pass_a_limit,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let (id, m) = (tenant.id.clone(), minute(&app));
        // Twenty proxies' batches over three buckets, in different orders.
        let batches = (0..20).map(|i| {
            let (app, id) = (&app, id.clone());
            let mut buckets = vec!["agt_a", "agt_b", "agt_c"];
            buckets.rotate_left(i % 3);
            async move {
                let asks = buckets.iter().map(|b| ask_of(&id, b, m)).collect();
                let granted = grants(app, asks).await;
                buckets.into_iter().zip(granted).collect::<Vec<_>>()
            }
        });
        let answers = futures_util::future::join_all(batches).await;
        for bucket in ["agt_a", "agt_b", "agt_c"] {
            let total: i64 = answers
                .iter()
                .flatten()
                .filter(|(b, _)| *b == bucket)
                .map(|(_, granted)| granted)
                .sum();
            assert!(total <= 80, "{bucket}: granted {total} of 80");
            // Twenty asks of an eighth of what is left each leave about a tenth.
            assert!(total >= 70, "{bucket}: granted only {total}");
        }
    }
);
