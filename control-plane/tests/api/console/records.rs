//! The console's record pages against the API they show: the audit trail (filters,
//! paging, exports, the chain's badge) and costs (the chart's table and its CSV, to the
//! micro-dollar, for requests made through a running proxy).

use std::time::Duration;

use serde_json::{json, Value};

use super::{table, text_of, usd, Browser};
use crate::helpers::expect_status;
use crate::proxy::{eventually, MockProvider, TestProxy};

db_test!(
    an_auditor_filters_pages_exports_and_verifies_the_trail,
    |app| {
        let tenant = app.new_tenant("enterprise").await;
        let key = &tenant.admin_key;
        let mut agents = Vec::new();
        for n in 0..55 {
            let agent = app
                .register_agent(key, json!({ "name": format!("audited-{n:02}") }))
                .await;
            agents.push(agent["id"].as_str().unwrap().to_owned());
        }
        expect_status(
            app.post(
                &format!("/agents/{}/block", agents[3]),
                key,
                json!({ "reason": "audit test" }),
            )
            .await,
            204,
        )
        .await;
        let mut browser = Browser::new(&app);
        browser.sign_in_with_key(key).await;

        // The whole trail, newest first, 50 a page, as the API lists it.
        let api = expect_status(app.get("/audit-trail?limit=50", key).await, 200).await;
        let total = api["meta"]["total"].as_i64().unwrap();
        let first = browser.get("/console/audit").await;
        assert_eq!(first.status, 200, "{}", first.body);
        let rows = table(&first, "events");
        assert_eq!(rows.len(), 50);
        let seqs: Vec<String> = api["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].to_string())
            .collect();
        assert_eq!(rows.iter().map(|r| r[0].clone()).collect::<Vec<_>>(), seqs);
        assert!(first
            .body
            .contains(&format!("{total} events, newest first; page 1")));
        assert_eq!(rows[0][2], "agent.blocked");
        assert!(rows[0][5].contains("audit test"), "{:?}", rows[0]);
        let second = browser.get("/console/audit?page=2").await;
        assert_eq!(table(&second, "events").len() as i64, total - 50);

        // Filters: by type, by target, by actor; each as the API filters.
        let blocked = browser.get("/console/audit?event_type=agent.blocked").await;
        let rows = table(&blocked, "events");
        assert_eq!(rows.len(), 1);
        assert!(rows[0][4].contains(&agents[3]));
        let target = browser
            .get(&format!("/console/audit?target_id={}", agents[3]))
            .await;
        assert_eq!(
            table(&target, "events")
                .iter()
                .map(|r| r[2].clone())
                .collect::<Vec<_>>(),
            ["agent.blocked", "agent.registered"]
        );
        let actor = rows[0][3].clone();
        assert!(actor.starts_with("api_key:"), "{actor}");
        let by_actor = browser
            .get(&format!(
                "/console/audit?actor={actor}&event_type=agent.registered"
            ))
            .await;
        assert_eq!(table(&by_actor, "events").len(), 50);
        let api_by_actor = expect_status(
            app.get(
                &format!("/audit-trail?actor={actor}&event_type=agent.registered"),
                key,
            )
            .await,
            200,
        )
        .await;
        assert_eq!(api_by_actor["meta"]["total"], json!(55));
        let nobody = browser.get("/console/audit?actor=system").await;
        assert!(nobody.body.contains("0 events match"));
        assert!(!nobody.body.contains("<table id=\"events\">"));
        // A value the API would refuse is a clear error here too.
        let wrong = browser.get("/console/audit?from=yesterday").await;
        assert_eq!(wrong.status, 422, "{}", wrong.body);

        // The exports hold what the filtered view holds, as the API exports it.
        let csv = browser
            .get("/console/audit/export/csv?event_type=agent.registered")
            .await;
        assert_eq!(csv.status, 200);
        assert!(csv.headers["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment; filename=\"audit-trail-"));
        let lines: Vec<&str> = csv.body.lines().collect();
        assert_eq!(lines.len(), 56, "a header and 55 events");
        let api_csv = app
            .request(
                reqwest::Method::GET,
                "/audit-trail/export?format=csv&event_type=agent.registered",
                Some(key),
            )
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(csv.body, api_csv);
        let json_export = browser
            .get(&format!(
                "/console/audit/export/json?target_id={}",
                agents[3]
            ))
            .await;
        let events: Value = serde_json::from_str(&json_export.body).unwrap();
        assert_eq!(events.as_array().unwrap().len(), 2);
        assert_eq!(events[1]["event_type"], "agent.blocked");
        let page_links = first.body.contains("/console/audit/export/csv\"")
            && first.body.contains("/console/audit/export/json\"");
        assert!(page_links, "the unfiltered page links both exports");
        assert_eq!(browser.get("/console/audit/export/xml").await.status, 404);

        // The badge: intact after a walk of every event.
        let badge = browser.get("/console/audit/verification").await;
        assert!(
            badge
                .body
                .contains(&format!("Hash chain intact: {total} events verified")),
            "{}",
            badge.body
        );
        // Events appended since are verified on the next load, from the last verified
        // link on.
        expect_status(
            app.post(
                &format!("/agents/{}/unblock", agents[3]),
                key,
                json!({ "reason": "reviewed" }),
            )
            .await,
            204,
        )
        .await;
        let badge = browser.get("/console/audit/verification").await;
        let appended = format!("Hash chain intact: {} events verified", total + 1);
        assert!(badge.body.contains(&appended), "{}", badge.body);

        // An event altered in place, its successors' links untouched: a check of what
        // is new does not see it; the button's walk of every event does, and names it.
        let altered = &api["data"][10];
        let original: String = sqlx::query_scalar("SELECT details FROM audit_events WHERE id = $1")
            .bind(altered["id"].as_str().unwrap())
            .fetch_one(app.db.pool())
            .await
            .unwrap();
        sqlx::query("UPDATE audit_events SET details = '{\"name\":\"forged\"}' WHERE id = $1")
            .bind(altered["id"].as_str().unwrap())
            .execute(app.db.pool())
            .await
            .unwrap();
        let broken_text = format!(
            "Hash chain broken at seq {} (event {}): the event was altered after it was written",
            altered["seq"],
            altered["id"].as_str().unwrap()
        );
        let badge = browser.get("/console/audit/verification").await;
        assert!(badge.body.contains("class=\"badge ok\""), "{}", badge.body);
        let walked = browser.get("/console/audit/verification?whole=true").await;
        let text = text_of(&walked.body);
        assert!(walked.body.contains("class=\"badge broken\""), "{text}");
        assert!(text.contains(&broken_text), "{text}");
        // Broken stays broken: no verified link is kept for a broken chain.
        let again = browser.get("/console/audit/verification").await;
        assert!(text_of(&again.body).contains(&broken_text));

        // Repaired and walked, then altered again: once the walk is older than its
        // bound, the next load walks every event by itself.
        sqlx::query("UPDATE audit_events SET details = $2 WHERE id = $1")
            .bind(altered["id"].as_str().unwrap())
            .bind(&original)
            .execute(app.db.pool())
            .await
            .unwrap();
        let repaired = browser.get("/console/audit/verification?whole=true").await;
        assert!(
            repaired.body.contains("class=\"badge ok\""),
            "{}",
            repaired.body
        );
        sqlx::query("UPDATE audit_events SET actor = 'forged' WHERE id = $1")
            .bind(altered["id"].as_str().unwrap())
            .execute(app.db.pool())
            .await
            .unwrap();
        // The bound: `WALK_EVERY_MS` (five minutes).
        app.clock.advance(5 * 60 * 1000);
        let badge = browser.get("/console/audit/verification").await;
        assert!(
            text_of(&badge.body).contains(&broken_text),
            "{}",
            badge.body
        );
        assert_eq!(
            browser
                .get("/console/audit/verification?whole=maybe")
                .await
                .status,
            422
        );
    }
);

db_test!(
    spend_through_the_proxy_shows_to_the_micro_dollar_with_its_csv,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, raw, created) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "spender" }))
            .await;
        let key = &tenant.admin_key;
        let agent_id = created["agent_id"].as_str().unwrap();
        for model in ["gpt-4o", "gpt-4o", "gpt-4o-mini"] {
            assert_eq!(proxy.chat_answer(&raw, model).await.0, 200);
        }
        let series = eventually(Duration::from_secs(10), || async {
            let body = expect_status(app.get("/cost/timeseries", key).await, 200).await;
            let requests: i64 = body["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["requests"].as_i64().unwrap())
                .sum();
            (requests == 3).then_some(body)
        })
        .await;
        let spent: Vec<&Value> = series["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["requests"].as_i64().unwrap() > 0)
            .collect();
        assert_eq!(spent.len(), 1, "all of it today");
        let cost = spent[0]["cost_usd"].as_f64().unwrap();
        assert!(cost > 0.0);

        let mut browser = Browser::new(&app);
        browser.sign_in_with_key(key).await;
        let page = browser.get("/console/costs").await;
        assert_eq!(page.status, 200, "{}", page.body);
        // The chart's table: this month's days, today's row with the exact spend.
        let now = app.clock.now();
        let days = (now.as_millis() - now.month_start()) / (24 * 3_600_000) + 1;
        let rows = table(&page, "series");
        assert_eq!(rows.len() as i64, days);
        let today = rows.last().unwrap();
        assert_eq!(
            today[..3],
            [
                spent[0]["timestamp"].as_str().unwrap().to_owned(),
                usd(cost),
                "3".to_owned()
            ]
        );
        assert!(page.body.contains(&format!("Spend per day: {}", usd(cost))));
        // By model and by agent, as the API has them.
        let models = table(&page, "models");
        let api_models = expect_status(app.get("/cost/by-model", key).await, 200).await;
        assert_eq!(models.len(), 2);
        for (row, model) in models.iter().zip(api_models["data"].as_array().unwrap()) {
            assert_eq!(row[1], model["model_name"].as_str().unwrap());
            assert_eq!(row[2], usd(model["total_cost_usd"].as_f64().unwrap()));
        }
        assert_eq!(table(&page, "agents")[0][2], usd(cost));
        assert_eq!(
            table(&page, "providers")[0][..2],
            ["openai".to_owned(), usd(cost)]
        );

        // The CSV holds the same rows, to the micro-dollar.
        let link = &page.body[page.body.find("/console/costs/export/series?").unwrap()..];
        let link = text_of(&link[..link.find('"').unwrap()]);
        let csv = browser.get(&link).await;
        assert_eq!(csv.status, 200);
        assert!(csv.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/csv"));
        let lines: Vec<&str> = csv.body.lines().collect();
        assert_eq!(
            lines[0],
            "timestamp,cost_usd,input_tokens,output_tokens,requests"
        );
        assert_eq!(lines.len() as i64, days + 1, "a header and a row per day");
        let last: Vec<&str> = lines.last().unwrap().split(',').collect();
        assert_eq!(last[0], spent[0]["timestamp"].as_str().unwrap());
        assert_eq!(last[1], format!("{cost:.6}"));
        assert_eq!(last[4], "3");
        let agents_csv = browser
            .get(&link.replace("/export/series", "/export/agents"))
            .await;
        assert!(agents_csv
            .body
            .lines()
            .nth(1)
            .unwrap()
            .starts_with(agent_id));

        // Filters in the URL: an hourly view of one agent; a team that spent nothing.
        let hourly = browser
            .get(&format!(
                "/console/costs?granularity=hour&agent_id={agent_id}"
            ))
            .await;
        assert_eq!(table(&hourly, "series").len() as i64, days * 24);
        let nothing = browser.get("/console/costs?team=nobody").await;
        assert!(table(&nothing, "models").is_empty());
        // A range the API refuses is a clear error, not an empty page.
        let refused = browser
            .get("/console/costs?from=2026-01-01&to=2026-12-31&granularity=hour")
            .await;
        assert_eq!(refused.status, 422, "{}", refused.body);
        // Without cost:read the page is refused.
        let reader = app.key_with_scopes(&tenant, &["registry:read"]).await;
        let mut other = Browser::new(&app);
        other.sign_in_with_key(&reader).await;
        assert_eq!(other.get("/console/costs").await.status, 403);
    }
);
