//! What people do in the console, end to end through a running proxy: approving a held
//! request, pulling the kill switch; and what they must not be able to do.

use std::time::Duration;

use reqwest::header::COOKIE;
use serde_json::json;

use super::{usd, Browser};
use crate::helpers::expect_status;
use crate::proxy::{eventually, HeldForApproval, MockProvider, TestProxy};

db_test!(
    a_held_request_is_approved_in_the_console_and_the_retry_passes,
    |app| {
        let held = HeldForApproval::start(&app, "deployer").await;
        let (proxy, tenant, raw, created) = (&held.proxy, &held.tenant, &held.key, &held.created);
        let mut browser = Browser::new(&app);
        browser.sign_in_with_key(&tenant.admin_key).await;

        // The live queue's event stream, opened before the agent asks.
        let mut events = app
            .client
            .get(format!("{}/console/approvals/events", app.base))
            .header(COOKIE, browser.cookie_header())
            .send()
            .await
            .unwrap();
        assert_eq!(events.status(), 200);
        assert!(
            String::from_utf8_lossy(&events.chunk().await.unwrap().unwrap()).contains("watching")
        );

        let (status, held) = proxy.chat_answer(raw, "gpt-4o").await;
        assert_eq!(status, 403);
        assert_eq!(held["error"], "approval_required");
        // The open page hears of it without a reload.
        let heard = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let chunk = events.chunk().await.unwrap().unwrap();
                let text = String::from_utf8_lossy(&chunk).into_owned();
                if text.contains("event: approvals") {
                    return text;
                }
            }
        })
        .await
        .expect("an approvals event within 10 s");
        assert!(heard.contains("data: 1"), "{heard}");
        // A page rendered empty whose stream opens only after the request was held
        // hears of it at the stream's first look.
        let mut late = app
            .client
            .get(format!(
                "{}/console/approvals/events?total=0&oldest=0",
                app.base
            ))
            .header(COOKIE, browser.cookie_header())
            .send()
            .await
            .unwrap();
        let first = String::from_utf8_lossy(&late.chunk().await.unwrap().unwrap()).into_owned();
        assert!(first.contains("event: approvals"), "{first}");

        let page = browser.get("/console/approvals").await;
        assert_eq!(page.status, 200);
        assert!(page.body.contains("openai gpt-4o"), "{}", page.body);
        let agent_id = created["agent_id"].as_str().unwrap();
        assert!(page.body.contains(agent_id));
        // Named for people: the agent and the policy that held it.
        assert!(page.body.contains(">deployer</a>"), "{}", page.body);
        assert!(page.body.contains("approve gpt-4o"));
        let approvals = expect_status(
            app.get("/approvals?status=pending", &tenant.admin_key)
                .await,
            200,
        )
        .await;
        let id = approvals["data"][0]["id"].as_i64().unwrap();

        let decided = browser
            .post(
                &format!("/console/approvals/{id}"),
                &[
                    ("csrf", &page.csrf()),
                    ("decision", "approved"),
                    ("reason", "release day"),
                ],
            )
            .await;
        assert_eq!(decided.status, 303, "{}", decided.body);
        assert_eq!(decided.location(), "/console/approvals?enforcement=applied");
        let after = browser.get(decided.location()).await;
        assert!(after.body.contains("in force on every connected proxy"));
        assert!(after.body.contains("Nothing waits for a reviewer."));
        assert!(after.body.contains("release day"));
        // The retry passes at once; the reviewer is the signed-in key, not a typed name.
        assert_eq!(proxy.chat_answer(raw, "gpt-4o").await.0, 200);
        let approval = expect_status(
            app.get(&format!("/approvals/{id}"), &tenant.admin_key)
                .await,
            200,
        )
        .await;
        assert_eq!(approval["data"]["status"], "approved");
        assert_eq!(approval["data"]["agent_name"], "deployer");
        assert_eq!(approval["data"]["policy_name"], "approve gpt-4o");
        assert!(approval["data"]["reviewer_id"]
            .as_str()
            .unwrap()
            .starts_with("API key key_"));

        // Signing out ends the live queue's stream too.
        let page = browser.get("/console/approvals").await;
        browser
            .post("/console/sign-out", &[("csrf", &page.csrf())])
            .await;
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            while events.chunk().await.unwrap().is_some() {}
        })
        .await;
        assert!(ended.is_ok(), "the event stream outlived the session");
    }
);

db_test!(
    the_kill_switch_in_the_console_stops_the_very_next_request,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, raw, created) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "runaway" }))
            .await;
        let agent_id = created["agent_id"].as_str().unwrap();
        let agent = expect_status(
            app.get(&format!("/agents/{agent_id}"), &tenant.admin_key)
                .await,
            200,
        )
        .await;
        let name = agent["data"]["name"].as_str().unwrap().to_owned();
        let mut browser = Browser::new(&app);
        browser.sign_in_with_key(&tenant.admin_key).await;
        let path = format!("/console/agents/{agent_id}");
        let page = browser.get(&path).await;
        assert!(page.body.contains("Kill switch"));

        // A wrong confirmation changes nothing.
        let unconfirmed = browser
            .post(
                &format!("{path}/block"),
                &[
                    ("csrf", &page.csrf()),
                    ("reason", "loop"),
                    ("confirm", "someone else"),
                ],
            )
            .await;
        assert_eq!(unconfirmed.status, 400);
        assert_eq!(proxy.chat_answer(&raw, "gpt-4o-mini").await.0, 200);

        let blocked = browser
            .post(
                &format!("{path}/block"),
                &[
                    ("csrf", &page.csrf()),
                    ("reason", "runaway loop"),
                    ("confirm", &name),
                ],
            )
            .await;
        assert_eq!(blocked.status, 303, "{}", blocked.body);
        assert_eq!(blocked.location(), format!("{path}?enforcement=applied"));
        let (status, refused) = proxy.chat_answer(&raw, "gpt-4o-mini").await;
        assert_eq!(status, 403);
        assert_eq!(refused["error"]["code"], "agent_blocked", "{refused}");
        let shown = browser.get(blocked.location()).await;
        assert!(shown.body.contains("in force on every connected proxy"));
        assert!(shown.body.contains("Reason: runaway loop"));

        let unblocked = browser
            .post(
                &format!("{path}/unblock"),
                &[("csrf", &shown.csrf()), ("confirm", &name)],
            )
            .await;
        assert_eq!(unblocked.status, 303, "{}", unblocked.body);
        assert_eq!(proxy.chat_answer(&raw, "gpt-4o-mini").await.0, 200);
        let events = app.audit_events(&tenant.id, agent_id).await;
        assert!(events.contains(&"agent.blocked".to_owned()), "{events:?}");
        assert!(events.contains(&"agent.unblocked".to_owned()), "{events:?}");

        // The two requests that passed are the agent's cost this month, as the API has it.
        let costs = eventually(Duration::from_secs(10), || {
            let (app, key) = (&app, &tenant.admin_key);
            async move {
                let path = format!("/cost/by-model?agent_id={agent_id}");
                let body = expect_status(app.get(&path, key).await, 200).await;
                (body["data"][0]["requests"] == json!(2)).then_some(body)
            }
        })
        .await;
        let model = &costs["data"][0];
        assert_eq!(model["model_name"], "gpt-4o-mini");
        let cost = model["total_cost_usd"].as_f64().unwrap();
        assert!(cost > 0.0, "{costs}");
        let page = browser.get(&path).await;
        let table = &page.body[page.body.find("<table id=\"cost-by-model\">").unwrap()..];
        let row = &table[table.find("<tbody>").unwrap()..table.find("</tbody>").unwrap()];
        let cells: Vec<&str> = row
            .split("<td")
            .skip(1)
            .map(|cell| &cell[cell.find('>').unwrap() + 1..cell.find("</td>").unwrap()])
            .collect();
        let tokens = |field: &str| model[field].as_i64().unwrap().to_string();
        assert_eq!(
            cells,
            [
                "openai",
                "gpt-4o-mini",
                "2",
                &tokens("input_tokens"),
                &tokens("output_tokens"),
                &usd(cost),
            ]
        );
        assert!(page
            .body
            .contains(&format!("Cost this month: {}", usd(cost))));
    }
);

db_test!(
    a_read_only_person_sees_no_action_and_a_forged_post_changes_nothing,
    |app| {
        let held = HeldForApproval::start(&app, "watched").await;
        let (proxy, tenant, raw, created) = (&held.proxy, &held.tenant, &held.key, &held.created);
        assert_eq!(proxy.chat_answer(raw, "gpt-4o").await.0, 403);
        let agent_id = created["agent_id"].as_str().unwrap();
        let reader = app
            .key_with_scopes(
                tenant,
                &["registry:read", "governance:read", "monitoring:read"],
            )
            .await;
        let mut browser = Browser::new(&app);
        browser.sign_in_with_key(&reader).await;

        // The held request is listed, without the forms to decide it.
        let queue = browser.get("/console/approvals").await;
        assert!(queue.body.contains("openai gpt-4o"), "{}", queue.body);
        assert!(!queue.body.contains("name=\"decision\""));
        let path = format!("/console/agents/{agent_id}");
        let page = browser.get(&path).await;
        assert_eq!(page.status, 200);
        assert!(!page.body.contains("Kill switch"));
        assert!(!page.body.contains("/block\""));
        // Without cost:read, no spend either.
        assert!(!page.body.contains("Cost this month"));

        // Posts made by hand, with a valid CSRF token, are refused by scope.
        let pending = expect_status(
            app.get("/approvals?status=pending", &tenant.admin_key)
                .await,
            200,
        )
        .await;
        let id = pending["data"][0]["id"].as_i64().unwrap();
        let decide = browser
            .post(
                &format!("/console/approvals/{id}"),
                &[("csrf", &page.csrf()), ("decision", "approved")],
            )
            .await;
        assert_eq!(decide.status, 403);
        assert!(decide.body.contains("governance:write"));
        let agent = expect_status(
            app.get(&format!("/agents/{agent_id}"), &tenant.admin_key)
                .await,
            200,
        )
        .await;
        let name = agent["data"]["name"].as_str().unwrap();
        let block = browser
            .post(
                &format!("{path}/block"),
                &[("csrf", &page.csrf()), ("reason", "x"), ("confirm", name)],
            )
            .await;
        assert_eq!(block.status, 403);
        assert!(block.body.contains("admin"));
        // Nothing changed: the agent still passes where no approval is needed, and is held
        // where it is.
        assert_eq!(proxy.chat_answer(raw, "gpt-4o-mini").await.0, 200);
        assert_eq!(proxy.chat_answer(raw, "gpt-4o").await.0, 403);
    }
);

db_test!(cross_site_posts_are_refused_and_names_show_as_text, |app| {
    let tenant = app.new_tenant("starter").await;
    let agent = app
        .register_agent(
            &tenant.admin_key,
            json!({ "name": "<img src=x onerror=alert(1)>" }),
        )
        .await;
    let agent_id = agent["id"].as_str().unwrap();
    let mut browser = Browser::new(&app);
    browser.sign_in_with_key(&tenant.admin_key).await;
    let path = format!("/console/agents/{agent_id}");
    let page = browser.get(&path).await;
    assert!(page.body.contains("&#60;img src=x onerror=alert(1)&#62;"));
    assert!(
        !page.body.contains("<img src=x"),
        "the name is text, not markup"
    );
    let name = "<img src=x onerror=alert(1)>";

    // Another site's page posting with the victim's cookie: refused by origin.
    let cross = browser
        .post_from(
            "https://evil.example",
            &format!("{path}/block"),
            &[("csrf", &page.csrf()), ("reason", "x"), ("confirm", name)],
        )
        .await;
    assert_eq!(cross.status, 403);
    // Same origin but without this session's token: none, a made-up one, or the token
    // of another session (another person's page).
    let mut other = Browser::new(&app);
    other.sign_in_with_key(&tenant.admin_key).await;
    let others = other.get(&path).await.csrf();
    assert_ne!(others, page.csrf());
    for token in ["", "0000", &others] {
        let forged = browser
            .post(
                &format!("{path}/block"),
                &[("csrf", token), ("reason", "x"), ("confirm", name)],
            )
            .await;
        assert_eq!(forged.status, 403, "{token:?}");
    }
    let agent = expect_status(
        app.get(&format!("/agents/{agent_id}"), &tenant.admin_key)
            .await,
        200,
    )
    .await;
    assert_eq!(agent["data"]["blocked"], false);
    assert!(app
        .audit_events(&tenant.id, agent_id)
        .await
        .iter()
        .all(|e| e != "agent.blocked"));
});
