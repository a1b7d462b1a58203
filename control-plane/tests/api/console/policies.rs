//! The policies page against the API: created from a template, enabled from the page,
//! and the dry-run form giving what `/policies/evaluate` gives.

use serde_json::{json, Value};

use super::{table, Browser};
use crate::helpers::{create_policy, expect_status};

db_test!(
    policies_are_made_switched_and_dry_run_from_the_console,
    |app| {
        let tenant = app.new_tenant("enterprise").await;
        let key = &tenant.admin_key;
        let agent = app
            .register_agent(
                key,
                json!({ "name": "dry-runner", "environment": "production" }),
            )
            .await;
        let agent_id = agent["id"].as_str().unwrap();
        create_policy(
            &app,
            key,
            json!({ "name": "mini only", "policy_type": "model_allowlist",
                    "config": { "allowed_models": ["gpt-4o-mini"] } }),
        )
        .await;
        let mut browser = Browser::new(&app);
        browser.sign_in_with_key(key).await;

        // A policy from a template, created disabled, then enabled from its row.
        let page = browser.get("/console/policies").await;
        assert_eq!(page.status, 200, "{}", page.body);
        let created = browser
            .post(
                "/console/policies/from-template/production-approval",
                &[("csrf", &page.csrf()), ("name", "prod needs a human")],
            )
            .await;
        assert_eq!(created.status, 303, "{}", created.body);
        let listed = expect_status(app.get("/policies", key).await, 200).await;
        let made = listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "prod needs a human")
            .unwrap()
            .clone();
        assert_eq!(made["enabled"], false);
        assert_eq!(
            created.location(),
            format!("/console/policies#policy-{}", made["id"])
        );
        let enabled = browser
            .post(
                &format!("/console/policies/{}/enabled", made["id"]),
                &[("csrf", &page.csrf()), ("enabled", "true")],
            )
            .await;
        assert_eq!(enabled.status, 303, "{}", enabled.body);
        // No proxy is connected: saved, and enforced as soon as one connects.
        assert_eq!(enabled.location(), "/console/policies?enforcement=applied");
        let policy = expect_status(
            app.get(&format!("/policies/{}", made["id"]), key).await,
            200,
        )
        .await;
        assert_eq!(policy["data"]["enabled"], true);

        // The dry run: the same results as the API, for requests that pass and fail.
        for (model, environment) in [
            ("gpt-4o", ""),
            ("gpt-4o-mini", "staging"),
            ("gpt-4o-mini", ""),
        ] {
            let mut body = json!({ "agent_id": agent_id, "provider": "openai", "model": model });
            if !environment.is_empty() {
                body["environment"] = json!(environment);
            }
            let api = expect_status(app.post("/policies/evaluate", key, body).await, 200).await;
            let expected: Vec<Vec<String>> = api["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    vec![
                        r["policy_name"].as_str().unwrap().to_owned(),
                        r["policy_type"].as_str().unwrap().to_owned(),
                        r["result"].as_str().unwrap().to_owned(),
                        r["reason"].as_str().unwrap_or_default().to_owned(),
                    ]
                })
                .collect();
            let page = browser
                .get(&format!(
                    "/console/policies?agent_id={agent_id}&provider=openai&model={model}&environment={environment}&estimated_cost_usd="
                ))
                .await;
            assert_eq!(page.status, 200, "{}", page.body);
            assert_eq!(table(&page, "dry-run"), expected, "{model} {environment}");
            let fails = expected.iter().any(|row| row[2] == "fail");
            let verdict = if fails {
                "The request would be refused or held."
            } else {
                "The request would pass."
            };
            assert!(page.body.contains(verdict), "{model} {environment}");
        }
        // What the API refuses is said on the page, with the API's reason.
        let unknown = browser
            .get("/console/policies?agent_id=agt_nobody&provider=openai&model=gpt-4o")
            .await;
        assert_eq!(unknown.status, 200);
        assert!(unknown
            .body
            .contains("The request could not be evaluated: agent not found"));
        let bad = browser
            .get(&format!(
                "/console/policies?agent_id={agent_id}&provider=openai&model=gpt-4o&estimated_cost_usd=lots"
            ))
            .await;
        assert!(bad.body.contains("estimated_cost_usd: must be a number"));

        // A reader sees the list and the dry run, no forms, and a post is refused.
        let reader = app.key_with_scopes(&tenant, &["governance:read"]).await;
        let mut other = Browser::new(&app);
        other.sign_in_with_key(&reader).await;
        let page = other.get("/console/policies").await;
        assert!(page.body.contains("mini only"));
        assert!(!page.body.contains("/enabled\""));
        let refused = other
            .post(
                &format!("/console/policies/{}/enabled", made["id"]),
                &[("csrf", &page.csrf()), ("enabled", "false")],
            )
            .await;
        assert_eq!(refused.status, 403);
        let policy: Value = expect_status(
            app.get(&format!("/policies/{}", made["id"]), key).await,
            200,
        )
        .await;
        assert_eq!(policy["data"]["enabled"], true);
    }
);
