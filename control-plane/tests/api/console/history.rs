//! The approvals page's history: decided approvals only, filtered by status and agent
//! from the URL, in pages of 50 with links that keep the filters.

use serde_json::{json, Value};

use super::{table, Browser, Page};
use crate::helpers::{create_policy, expect_status, report_decisions, TestApp};

/// Queues one pending approval per model for `agent_id`, as the proxy reports held
/// requests, and answers their ids in the order of `models`.
async fn hold(
    app: &TestApp,
    tenant_id: &str,
    key: &str,
    agent_id: &str,
    policy_id: i64,
    models: &[String],
) -> Vec<i64> {
    let decisions: Vec<Value> = models
        .iter()
        .map(|model| {
            json!({
                "tenant_id": tenant_id,
                "evaluation": { "request_id": format!("{agent_id}-{model}"), "agent_id": agent_id,
                    "provider": "openai", "model": model, "evaluated_at": "2026-11-23T10:00:00Z",
                    "results": [{ "policy_id": policy_id, "policy_name": "hold everything",
                        "policy_type": "require_approval", "result": "fail",
                        "reason": "requires human approval" }] },
                "approval": { "policy_id": policy_id,
                              "request_context": { "provider": "openai", "model": model } },
            })
        })
        .collect();
    report_decisions(app, &format!("batch-{agent_id}-{}", models[0]), &decisions).await;
    let pending = expect_status(
        app.get(
            &format!("/approvals?status=pending&agent_id={agent_id}&limit=100"),
            key,
        )
        .await,
        200,
    )
    .await;
    let mut ids: Vec<(String, i64)> = pending["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["request_context"]["model"].as_str().unwrap().to_owned(),
                a["id"].as_i64().unwrap(),
            )
        })
        .filter(|(model, _)| models.contains(model))
        .collect();
    ids.sort_by_key(|(model, _)| models.iter().position(|m| m == model));
    assert_eq!(ids.len(), models.len());
    ids.into_iter().map(|(_, id)| id).collect()
}

async fn decide(app: &TestApp, key: &str, id: i64, decision: &str) {
    expect_status(
        app.post(
            &format!("/approvals/{id}/decide"),
            key,
            json!({ "reviewer_id": "ana", "decision": decision, "reason": format!("reason {id}") }),
        )
        .await,
        204,
    )
    .await;
}

/// The history table's rows: (agent, request, status).
fn rows(page: &Page) -> Vec<(String, String, String)> {
    table(page, "history")
        .into_iter()
        .map(|cells| (cells[0].clone(), cells[1].clone(), cells[2].clone()))
        .collect()
}

db_test!(
    the_approval_history_filters_by_status_and_agent_and_pages,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let policy = create_policy(
            &app,
            key,
            json!({ "name": "hold everything", "policy_type": "require_approval",
                    "config": { "providers": ["openai"] } }),
        )
        .await;
        let policy_id = policy["id"].as_i64().unwrap();
        let mut agents = Vec::new();
        for name in ["alpha", "beta"] {
            let agent = app.register_agent(key, json!({ "name": name })).await;
            agents.push(agent["id"].as_str().unwrap().to_owned());
        }
        // beta's first is left to expire: queued a minute before the others.
        let early = ["early".to_owned()];
        hold(&app, &tenant.id, key, &agents[1], policy_id, &early).await;
        app.clock.advance(60_000);
        // alpha: 55 approved, 1 denied, 1 left pending; beta: 2 denied.
        let models: Vec<String> = (0..57).map(|n| format!("model-{n:02}")).collect();
        let alpha = hold(&app, &tenant.id, key, &agents[0], policy_id, &models).await;
        for &id in &alpha[..55] {
            decide(&app, key, id, "approved").await;
        }
        decide(&app, key, alpha[55], "denied").await;
        let beta = hold(&app, &tenant.id, key, &agents[1], policy_id, &models[..2]).await;
        for &id in &beta {
            decide(&app, key, id, "denied").await;
        }
        // beta's early one has expired; alpha's last is still pending.
        app.clock.advance(24 * 3_600_000 - 30_000);

        let mut browser = Browser::new(&app);
        browser.sign_in_with_key(key).await;

        // Everything decided, newest first, none pending: 55 + 1 + 2 + 1 expired = 59.
        let first = browser.get("/console/approvals").await;
        assert_eq!(first.status, 200, "{}", first.body);
        assert!(first.body.contains("59 decided, newest first; page 1"));
        let shown = rows(&first);
        assert_eq!(shown.len(), 50);
        assert_eq!(
            shown[0],
            ("beta".into(), "openai model-01".into(), "denied".into())
        );
        assert!(shown.iter().all(|(_, _, status)| status != "pending"));
        assert!(!first.body.contains("rel=\"prev\""));
        // The next page keeps the filters and holds the rest.
        let older = "/console/approvals?page=2";
        assert!(first.body.contains(&format!("href=\"{older}\"")));
        let second = browser.get(older).await;
        let rest = rows(&second);
        assert_eq!(rest.len(), 9);
        assert_eq!(
            rest[8],
            ("beta".into(), "openai early".into(), "expired".into())
        );
        assert!(second
            .body
            .contains("href=\"/console/approvals?page=1\" rel=\"prev\""));
        assert!(!second.body.contains("rel=\"next\""));
        // The queue above the history still shows the one pending.
        assert!(second
            .body
            .contains(&format!("id=\"approval-{}\"", alpha[56])));

        // By status.
        let denied = browser.get("/console/approvals?status=denied").await;
        let shown = rows(&denied);
        assert_eq!(
            shown,
            vec![
                ("beta".into(), "openai model-01".into(), "denied".into()),
                ("beta".into(), "openai model-00".into(), "denied".into()),
                ("alpha".into(), "openai model-55".into(), "denied".into()),
            ]
        );
        assert!(denied.body.contains("<option value=\"denied\" selected>"));
        // By agent, and both, with paging that keeps them.
        let path = format!("/console/approvals?status=approved&agent_id={}", agents[0]);
        let approved = browser.get(&path).await;
        assert_eq!(rows(&approved).len(), 50);
        let next = format!(
            "href=\"/console/approvals?status=approved&#38;agent_id={}&#38;page=2\"",
            agents[0]
        );
        assert!(approved.body.contains(&next), "{}", approved.body);
        let page_two = browser.get(&format!("{path}&page=2")).await;
        let shown = rows(&page_two);
        assert_eq!(shown.len(), 5);
        assert!(shown
            .iter()
            .all(|row| row.0 == "alpha" && row.2 == "approved"));
        let beta_only = browser
            .get(&format!("/console/approvals?agent_id={}", agents[1]))
            .await;
        assert_eq!(
            rows(&beta_only)
                .iter()
                .map(|row| row.2.as_str())
                .collect::<Vec<_>>(),
            ["denied", "denied", "expired"]
        );
        let nobody = browser.get("/console/approvals?agent_id=agt_nobody").await;
        assert!(nobody
            .body
            .contains("No decided approvals match these filters."));

        // A status that is not one is a clear error, not a silent "all".
        let wrong = browser.get("/console/approvals?status=pending").await;
        assert_eq!(wrong.status, 422, "{}", wrong.body);
        assert!(
            wrong.body.contains("approved, denied or expired"),
            "{}",
            wrong.body
        );
        let wrong = browser.get("/console/approvals?page=0").await;
        assert_eq!(wrong.status, 422, "{}", wrong.body);
    }
);

db_test!(
    the_agents_list_pages_through_every_agent_under_its_filters,
    |app| {
        let tenant = app.new_tenant("enterprise").await;
        let key = &tenant.admin_key;
        for n in 0..105 {
            let team = if n % 2 == 0 { "even" } else { "odd" };
            app.register_agent(
                key,
                json!({ "name": format!("listed-{n:03}"), "team": team }),
            )
            .await;
        }
        let mut browser = Browser::new(&app);
        browser.sign_in_with_key(key).await;
        let count = |body: &str| body.matches("<a href=\"/console/agents/agt_").count();

        let first = browser.get("/console/agents").await;
        assert_eq!(first.status, 200);
        assert!(first.body.contains("105 agents; page 1, 100 shown."));
        assert_eq!(count(&first.body), 100);
        assert!(first
            .body
            .contains("href=\"/console/agents?page=2\" rel=\"next\""));
        let second = browser.get("/console/agents?page=2").await;
        assert_eq!(count(&second.body), 5);
        assert!(second
            .body
            .contains("href=\"/console/agents?page=1\" rel=\"prev\""));
        assert!(!second.body.contains("rel=\"next\""));

        // Under a filter the links keep it; a filter matching one page has none.
        let even = browser.get("/console/agents?team=even").await;
        assert_eq!(count(&even.body), 53);
        assert!(!even.body.contains("rel=\"next\""));
        let searched = browser.get("/console/agents?search=listed-1&page=1").await;
        assert!(
            searched.body.contains("<p>5 agents.</p>"),
            "{}",
            searched.body
        );

        for wrong in ["0", "abc", "-1"] {
            let page = browser.get(&format!("/console/agents?page={wrong}")).await;
            assert_eq!(page.status, 422, "page={wrong}");
        }
    }
);
