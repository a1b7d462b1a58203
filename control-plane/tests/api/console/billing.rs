//! The billing page against the API: the plan and its agents, an upgrade answering the
//! checkout link, a downgrade its effective date; only an admin sees it.

use serde_json::json;

use super::Browser;
use crate::helpers::expect_status;

db_test!(the_plan_is_shown_and_changed_from_the_console, |app| {
    let tenant = app.new_tenant("professional").await;
    let key = &tenant.admin_key;
    app.register_agent(key, json!({ "name": "billed" })).await;
    let billing = expect_status(app.get("/billing", key).await, 200).await["data"].clone();
    let mut browser = Browser::new(&app);
    browser.sign_in_with_key(key).await;
    let page = browser.get("/console/billing").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Plan: professional"));
    assert!(page.body.contains(&format!(
        "<dd id=\"agents-used\">{} of {}</dd>",
        billing["active_agents"], billing["agent_limit"]
    )));
    // The current plan is not offered.
    assert!(!page.body.contains("<option value=\"professional\">"));

    let upgrade = browser
        .post(
            "/console/billing/checkout",
            &[("csrf", &page.csrf()), ("plan", "enterprise")],
        )
        .await;
    assert_eq!(upgrade.status, 200, "{}", upgrade.body);
    assert!(upgrade
        .body
        .contains("Upgrade from professional to enterprise"));
    assert!(upgrade.body.contains(">Continue to payment</a>"));
    let downgrade = browser
        .post(
            "/console/billing/checkout",
            &[("csrf", &page.csrf()), ("plan", "starter")],
        )
        .await;
    assert_eq!(downgrade.status, 200, "{}", downgrade.body);
    let api_downgrade = expect_status(
        app.post("/billing/checkout", key, json!({ "plan": "starter" }))
            .await,
        200,
    )
    .await;
    assert!(downgrade.body.contains(&format!(
        "Downgrade from professional to starter, effective {}",
        api_downgrade["data"]["effective_date"].as_str().unwrap()
    )));
    // A plan the API refuses is its 422, shown as a page.
    let refused = browser
        .post(
            "/console/billing/checkout",
            &[("csrf", &page.csrf()), ("plan", "enterprise_plus")],
        )
        .await;
    assert_eq!(refused.status, 422);

    // Billing is an admin's: another key is refused the page.
    let reader = app.key_with_scopes(&tenant, &["registry:read"]).await;
    let mut other = Browser::new(&app);
    other.sign_in_with_key(&reader).await;
    assert_eq!(other.get("/console/billing").await.status, 403);
    assert_eq!(other.get("/console/notifications").await.status, 403);
});
