//! Tenant isolation: another tenant's ids answer 404 and change nothing.

use serde_json::json;

use crate::helpers::{expect_error, expect_status};

db_test!(another_tenants_resources_are_invisible, |app| {
    let a = app.new_tenant("starter").await;
    let b = app.new_tenant("starter").await;
    let agent = app
        .register_agent(
            &a.admin_key,
            json!({ "name": "secret-agent", "team": "hidden" }),
        )
        .await;
    let agent_id = agent["id"].as_str().unwrap();
    let team_id = agent["team_id"].as_str().unwrap();
    let key = expect_status(
        app.post(
            "/auth/api-keys",
            &a.admin_key,
            json!({ "name": "a-key", "scopes": ["registry:read"] }),
        )
        .await,
        201,
    )
    .await;
    let key_id = key["data"]["id"].as_str().unwrap();

    let b_key = &b.admin_key;
    expect_error(
        app.get(&format!("/agents/{agent_id}"), b_key).await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        app.patch(
            &format!("/agents/{agent_id}"),
            b_key,
            json!({ "name": "pwned" }),
        )
        .await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        app.delete(&format!("/agents/{agent_id}"), b_key).await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        app.get(&format!("/teams/{team_id}"), b_key).await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        app.patch(
            &format!("/teams/{team_id}"),
            b_key,
            json!({ "name": "pwned" }),
        )
        .await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        app.delete(&format!("/teams/{team_id}"), b_key).await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        app.delete(&format!("/auth/api-keys/{key_id}"), b_key).await,
        404,
        "not_found",
    )
    .await;

    for path in ["/agents", "/teams", "/auth/api-keys"] {
        let list = expect_status(app.get(path, b_key).await, 200).await;
        let text = list.to_string();
        assert!(
            !text.contains(agent_id) && !text.contains(team_id) && !text.contains(key_id),
            "{path}: {text}"
        );
    }
    // Filtering by A's team name finds nothing, and B may use the same name itself.
    let filtered = expect_status(app.get("/agents?team=hidden", b_key).await, 200).await;
    assert_eq!(filtered["meta"]["total"], json!(0));

    // Nothing of A's changed.
    let read = expect_status(
        app.get(&format!("/agents/{agent_id}"), &a.admin_key).await,
        200,
    )
    .await;
    assert_eq!(read["data"], agent);
    let team = expect_status(
        app.get(&format!("/teams/{team_id}"), &a.admin_key).await,
        200,
    )
    .await;
    assert_eq!(team["data"]["name"], json!("hidden"));
    let raw = key["data"]["raw_key"].as_str().unwrap();
    expect_status(app.get("/agents", raw).await, 200).await;
});
