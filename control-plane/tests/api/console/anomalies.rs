//! The anomalies page against the API: a detected anomaly listed and filtered,
//! acknowledged and resolved with notes; a rule disabled from the page.

use serde_json::json;
use warden_control_plane::anomalies::detect_tenant;

use super::Browser;
use crate::helpers::expect_status;

db_test!(
    anomalies_are_acknowledged_and_resolved_from_the_console,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let rule = expect_status(
            app.post(
                "/anomaly-rules",
                key,
                json!({ "anomaly_type": "cost_spike", "threshold_config": { "daily_cost_usd": 1 } }),
            )
            .await,
            201,
        )
        .await;
        let looping = app.register_agent(key, json!({ "name": "looping" })).await;
        let agent_id = looping["id"].as_str().unwrap();
        let usage = json!({ "agent_id": agent_id, "model_provider": "openai", "model_name": "gpt-4o",
                            "input_tokens": 1000, "output_tokens": 0, "cost_usd": 50.0 });
        expect_status(app.post("/telemetry/usage", key, usage).await, 201).await;
        let report = detect_tenant(&app.db, &tenant.id, app.clock.now())
            .await
            .unwrap();
        assert_eq!(report.opened, 1, "{report:?}");
        let listed = expect_status(app.get("/anomalies", key).await, 200).await;
        let id = listed["data"][0]["id"].as_str().unwrap().to_owned();

        let mut browser = Browser::new(&app);
        browser.sign_in_with_key(key).await;
        let page = browser.get("/console/anomalies").await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(page.body.contains(&format!("id=\"anomaly-{id}\"")));
        assert!(page.body.contains("cost spike: "));
        assert!(page.body.contains(">looping</a>"));
        // Filters are the API's.
        let none = browser.get("/console/anomalies?type=security_threat").await;
        assert!(none.body.contains("No anomalies match these filters."));
        let wrong = browser.get("/console/anomalies?severity=dire").await;
        assert_eq!(wrong.status, 422);

        let acknowledged = browser
            .post(
                &format!("/console/anomalies/{id}/acknowledge"),
                &[("csrf", &page.csrf()), ("note", "looking at the loop")],
            )
            .await;
        assert_eq!(acknowledged.status, 303, "{}", acknowledged.body);
        let anomaly = expect_status(app.get(&format!("/anomalies/{id}"), key).await, 200).await;
        assert_eq!(anomaly["data"]["status"], "acknowledged");
        assert_eq!(anomaly["data"]["note"], "looking at the loop");
        let page = browser.get("/console/anomalies?status=acknowledged").await;
        assert!(page.body.contains("looking at the loop"));
        assert!(!page
            .body
            .contains(&format!("/console/anomalies/{id}/acknowledge")));
        // Acknowledging twice is the API's conflict, shown as a page.
        let again = browser
            .post(
                &format!("/console/anomalies/{id}/acknowledge"),
                &[("csrf", &page.csrf())],
            )
            .await;
        assert_eq!(again.status, 409);

        let resolved = browser
            .post(
                &format!("/console/anomalies/{id}/resolve"),
                &[("csrf", &page.csrf()), ("resolution", "retry limit added")],
            )
            .await;
        assert_eq!(resolved.status, 303);
        let anomaly = expect_status(app.get(&format!("/anomalies/{id}"), key).await, 200).await;
        assert_eq!(anomaly["data"]["status"], "resolved");

        // The rule, disabled from its row.
        let page = browser.get("/console/anomalies").await;
        let disabled = browser
            .post(
                &format!("/console/anomaly-rules/{}/enabled", rule["data"]["id"]),
                &[("csrf", &page.csrf()), ("enabled", "false")],
            )
            .await;
        assert_eq!(disabled.status, 303, "{}", disabled.body);
        let rules = expect_status(app.get("/anomaly-rules", key).await, 200).await;
        assert_eq!(rules["data"][0]["enabled"], false);

        // A reader: the list, no forms; a post is refused.
        let reader = app.key_with_scopes(&tenant, &["anomaly:read"]).await;
        let mut other = Browser::new(&app);
        other.sign_in_with_key(&reader).await;
        let page = other.get("/console/anomalies").await;
        assert_eq!(page.status, 200);
        assert!(!page.body.contains("/enabled\""));
        let refused = other
            .post(
                &format!("/console/anomaly-rules/{}/enabled", rule["data"]["id"]),
                &[("csrf", &page.csrf()), ("enabled", "true")],
            )
            .await;
        assert_eq!(refused.status, 403);
    }
);
