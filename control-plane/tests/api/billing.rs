//! Billing: the account as shown, upgrades through checkout completed by the provider's
//! signed webhook (and every way a webhook is refused), downgrades at the end of the
//! period, the free slot.

use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use crate::helpers::{expect_error, expect_status, TestApp};

const SECRET: &str = "whsec_provider_current";
const OLD_SECRET: &str = "whsec_provider_previous";

fn sign(secret: &str, t: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{t}.{body}").as_bytes());
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn webhook(app: &TestApp, signature: &str, body: &str) -> reqwest::Response {
    app.client
        .post(format!("{}/billing/webhook", app.api))
        .header("content-type", "application/json")
        .header("warden-signature", signature)
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

async fn billing(app: &TestApp, key: &str) -> Value {
    expect_status(app.get("/billing", key).await, 200).await["data"].clone()
}

db_test!(
    an_upgrade_is_paid_through_checkout_and_applied_by_the_signed_webhook,
    |config| {
        config.billing.webhook_secrets = vec![
            warden_control_plane::config::Secret::new(SECRET),
            warden_control_plane::config::Secret::new(OLD_SECRET),
        ];
        config.billing.checkout_base_url = "https://pay.example.com/c/".to_owned();
    },
    |app| {
        let tenant = app.new_tenant("free").await;
        let key = &tenant.admin_key;
        let before = billing(&app, key).await;
        assert_eq!(before["plan"], "free");
        assert_eq!(before["features"]["hitl_approvals"], false);
        assert_eq!(before["features"]["governance_policies"], 3);
        assert_eq!(before["monthly_cost_usd"], 0.0);
        assert!(before["billing_period_start"]
            .as_str()
            .unwrap()
            .ends_with("-01T00:00:00.000Z"));
        expect_error(
            app.post("/proxy-keys", key, json!({"developer_label": "x"}))
                .await,
            402,
            "plan_upgrade_required",
        )
        .await;

        expect_error(
            app.post("/billing/checkout", key, json!({"plan": "enterprise_plus"}))
                .await,
            422,
            "validation_failed",
        )
        .await;
        expect_error(
            app.post("/billing/checkout", key, json!({"plan": "free"}))
                .await,
            422,
            "validation_failed",
        )
        .await;
        let reader = app.key_with_scopes(&tenant, &["registry:read"]).await;
        expect_error(
            app.post("/billing/checkout", &reader, json!({"plan": "starter"}))
                .await,
            403,
            "insufficient_scope",
        )
        .await;
        let checkout = expect_status(
            app.post("/billing/checkout", key, json!({"plan": "starter"}))
                .await,
            200,
        )
        .await["data"]
            .clone();
        assert_eq!(checkout["action"], "upgrade");
        assert_eq!(
            (checkout["from_plan"].clone(), checkout["to_plan"].clone()),
            (json!("free"), json!("starter"))
        );
        assert!(
            checkout["checkout_url"]
                .as_str()
                .unwrap()
                .starts_with("https://pay.example.com/c/chk_"),
            "{checkout}"
        );
        // A number, as every `*_usd` field is (spec 2.1).
        let amount = checkout["prorated_amount_usd"].as_f64().unwrap();
        assert!(amount > 0.0 && amount <= 99.0, "{checkout}");

        let now = app.clock.now().as_millis() / 1000;
        let body = json!({"id": format!("evt_{}", tenant.id), "event": "checkout.completed", "tenant_id": tenant.id,
        "plan": "starter", "amount_usd": amount, "timestamp": app.clock.now().to_string(),
        "payment_method": {"type": "card", "last_four": "4242", "expiry": "12/29"}}).to_string();
        // Refused, changing nothing: no header, a wrong secret, a stale time, an altered body.
        for signature in [
            String::new(),
            format!("t={now},v1={}", sign("whsec_wrong", now, &body)),
            format!("t={},v1={}", now - 301, sign(SECRET, now - 301, &body)),
            format!("t={now},v1=zz"),
        ] {
            let response = webhook(&app, &signature, &body).await;
            assert_eq!(response.status().as_u16(), 401, "{signature}");
        }
        let altered = body.replace("\"starter\"", "\"enterprise\"");
        let response = webhook(
            &app,
            &format!("t={now},v1={}", sign(SECRET, now, &body)),
            &altered,
        )
        .await;
        assert_eq!(response.status().as_u16(), 401);
        assert_eq!(billing(&app, key).await["plan"], "free");

        // During rotation the provider signs with both secrets; either verifies.
        let signature = format!(
            "t={now},v1={},v1={}",
            sign("whsec_other", now, &body),
            sign(OLD_SECRET, now, &body)
        );
        assert_eq!(
            webhook(&app, &signature, &body).await.status().as_u16(),
            200
        );
        let after = billing(&app, key).await;
        assert_eq!(after["plan"], "starter");
        assert_eq!(after["agent_limit"], 25);
        assert_eq!(
            after["payment_method"],
            json!({"type": "card", "last_four": "4242", "expiry": "12/29"})
        );
        assert_eq!(after["features"]["hitl_approvals"], true);
        expect_status(
            app.post("/proxy-keys", key, json!({"developer_label": "x"}))
                .await,
            201,
        )
        .await;

        // A replay answers 200 and changes nothing.
        assert_eq!(
            webhook(&app, &signature, &body).await.status().as_u16(),
            200
        );
        let events: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM audit_events WHERE tenant_id = $1 AND event_type = 'billing.payment_event'")
        .bind(&tenant.id).fetch_one(app.db.pool()).await.unwrap();
        assert_eq!(events, 1);

        // Unknown tenants, unknown events and malformed bodies are 4xx.
        for bad in [
            json!({"event": "checkout.completed", "tenant_id": "ten_nobody", "plan": "starter"})
                .to_string(),
            json!({"event": "refund.issued", "tenant_id": tenant.id}).to_string(),
            json!({"event": "checkout.completed", "tenant_id": tenant.id, "plan": "free"})
                .to_string(),
            "[1]".to_owned(),
            "{not json".to_owned(),
        ] {
            let response = webhook(
                &app,
                &format!("t={now},v1={}", sign(SECRET, now, &bad)),
                &bad,
            )
            .await;
            let status = response.status().as_u16();
            assert!(status == 400 || status == 422, "{bad}: {status}");
        }
        assert_eq!(billing(&app, key).await["plan"], "starter");

        // A failed payment marks the account past due and keeps the plan.
        let failed = json!({"id": format!("evt_f_{}", tenant.id), "event": "invoice.payment_failed", "tenant_id": tenant.id}).to_string();
        assert_eq!(
            webhook(
                &app,
                &format!("t={now},v1={}", sign(SECRET, now, &failed)),
                &failed
            )
            .await
            .status()
            .as_u16(),
            200
        );
        let account = billing(&app, key).await;
        assert_eq!(
            (account["plan"].clone(), account["payment_status"].clone()),
            (json!("starter"), json!("past_due"))
        );
        expect_error(
            app.post("/billing/checkout", key, json!({"plan": "starter"}))
                .await,
            409,
            "plan_unchanged",
        )
        .await;
    }
);

db_test!(downgrades_wait_for_the_period_end_and_need_room, |app| {
    let tenant = app.new_tenant("professional").await;
    let key = &tenant.admin_key;
    for i in 0..26 {
        app.register_agent(key, json!({ "name": format!("a{i}") }))
            .await;
    }
    let error = expect_error(
        app.post("/billing/checkout", key, json!({"plan": "starter"}))
            .await,
        409,
        "too_many_agents_for_plan",
    )
    .await;
    assert_eq!(error["error"]["details"]["agent_limit"], 25);
    let agents = expect_status(app.get("/agents?limit=1", key).await, 200).await;
    let one = agents["data"][0]["id"].as_str().unwrap();
    assert_eq!(
        app.delete(&format!("/agents/{one}"), key)
            .await
            .status()
            .as_u16(),
        204
    );

    let downgrade = expect_status(
        app.post("/billing/checkout", key, json!({"plan": "starter"}))
            .await,
        200,
    )
    .await["data"]
        .clone();
    assert_eq!(downgrade["action"], "downgrade");
    let effective = downgrade["effective_date"].as_str().unwrap().to_owned();
    assert!(effective.ends_with("-01T00:00:00.000Z"), "{downgrade}");
    let message = downgrade["message"].as_str().unwrap();
    assert!(message.contains("starter"), "{message}");
    // The target plan's agent limit, in the words spec section 8 reads it from.
    assert!(message.contains("25 active agents or fewer"), "{message}");
    let account = billing(&app, key).await;
    assert_eq!(account["plan"], "professional");
    assert_eq!(account["pending_change"]["plan"], "starter");
    assert_eq!(account["billing_period_end"], effective.as_str());

    // Nothing changes before the period ends; the round applies it after.
    warden_control_plane::api::billing::apply_due_plan_changes(&app.db, app.clock.now())
        .await
        .unwrap();
    assert_eq!(billing(&app, key).await["plan"], "professional");
    app.clock.advance(32 * 86_400_000);
    let applied =
        warden_control_plane::api::billing::apply_due_plan_changes(&app.db, app.clock.now())
            .await
            .unwrap();
    assert!(applied >= 1);
    let account = billing(&app, key).await;
    assert_eq!(account["plan"], "starter");
    assert_eq!(account["pending_change"], Value::Null);
    assert_eq!(account["agent_limit"], 25);
});

db_test!(a_free_tenant_chooses_its_recorded_agent, |app| {
    let tenant = app.new_tenant("free").await;
    let key = &tenant.admin_key;
    let first = app.register_agent(key, json!({ "name": "first" })).await;
    let second = app.register_agent(key, json!({ "name": "second" })).await;
    assert_eq!(billing(&app, key).await["free_agent_id"], first["id"]);
    expect_error(
        app.patch(
            "/billing/free-slot",
            key,
            json!({"agent_id": "agt_missing"}),
        )
        .await,
        422,
        "validation_failed",
    )
    .await;
    let slot = expect_status(
        app.patch("/billing/free-slot", key, json!({"agent_id": second["id"]}))
            .await,
        200,
    )
    .await["data"]
        .clone();
    assert_eq!(slot["free_agent_id"], second["id"]);
    assert_eq!(billing(&app, key).await["free_agent_id"], second["id"]);
    // Telemetry of the other agent is refused, from the next call on: one by one (402)
    // and in batches (per item).
    let usage = |agent: &Value| {
        json!({ "agent_id": agent["id"], "model_provider": "openai",
        "model_name": "gpt-4o", "input_tokens": 1, "output_tokens": 1 })
    };
    expect_status(app.post("/telemetry/usage", key, usage(&second)).await, 201).await;
    let refused = expect_error(
        app.post("/telemetry/usage", key, usage(&first)).await,
        402,
        "plan_upgrade_required",
    )
    .await;
    assert_eq!(refused["error"]["details"]["free_agent_id"], second["id"]);
    expect_error(
        app.post(
            "/telemetry/heartbeat",
            key,
            json!({"agent_id": first["id"]}),
        )
        .await,
        402,
        "plan_upgrade_required",
    )
    .await;
    let batch = expect_status(app.post("/telemetry/heartbeats", key, json!({"heartbeats": [
        {"agent_id": first["id"], "status": "healthy"}, {"agent_id": second["id"], "status": "healthy"}]})).await, 200).await["data"].clone();
    assert_eq!(batch["recorded"], 1);
    assert_eq!(batch["unrecorded_agent_ids"], json!([first["id"]]));
    let usages = expect_status(
        app.post(
            "/telemetry/usages",
            key,
            json!({"usages": [usage(&first), usage(&second)]}),
        )
        .await,
        200,
    )
    .await["data"]
        .clone();
    assert_eq!(
        (
            usages["accepted"].clone(),
            usages["errors"][0]["index"].clone()
        ),
        (json!(1), json!(0))
    );
    let paid = app.new_tenant("starter").await;
    let agent = app
        .register_agent(&paid.admin_key, json!({ "name": "x" }))
        .await;
    expect_error(
        app.patch(
            "/billing/free-slot",
            &paid.admin_key,
            json!({"agent_id": agent["id"]}),
        )
        .await,
        409,
        "not_on_free_plan",
    )
    .await;
});
