//! Teams: unique names, renames, deletes guarded by assigned agents.

use serde_json::json;

use crate::helpers::{expect_error, expect_status};

db_test!(teams_are_unique_by_name_and_renamable, |app| {
    let tenant = app.new_tenant("starter").await;
    let created = expect_status(
        app.post("/teams", &tenant.admin_key, json!({ "name": "alpha" }))
            .await,
        201,
    )
    .await;
    let team = &created["data"];
    assert!(team["id"].as_str().unwrap().starts_with("team_"));
    assert_eq!(team["agent_count"], json!(0));
    assert_eq!(team["monthly_cost_usd"], json!(0.0));
    let id = team["id"].as_str().unwrap();

    expect_error(
        app.post("/teams", &tenant.admin_key, json!({ "name": "alpha" }))
            .await,
        409,
        "team_name_taken",
    )
    .await;
    expect_status(
        app.post("/teams", &tenant.admin_key, json!({ "name": "beta" }))
            .await,
        201,
    )
    .await;
    expect_error(
        app.patch(
            &format!("/teams/{id}"),
            &tenant.admin_key,
            json!({ "name": "beta" }),
        )
        .await,
        409,
        "team_name_taken",
    )
    .await;
    let renamed = expect_status(
        app.patch(
            &format!("/teams/{id}"),
            &tenant.admin_key,
            json!({ "name": "gamma" }),
        )
        .await,
        200,
    )
    .await;
    assert_eq!(renamed["data"]["name"], json!("gamma"));
    let read = expect_status(
        app.get(&format!("/teams/{id}"), &tenant.admin_key).await,
        200,
    )
    .await;
    assert_eq!(read["data"]["name"], json!("gamma"));

    let list = expect_status(app.get("/teams", &tenant.admin_key).await, 200).await;
    assert_eq!(list["meta"]["total"], json!(2));
    let names: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["beta", "gamma"]);

    // The same name may exist in another tenant.
    let other = app.new_tenant("starter").await;
    expect_status(
        app.post("/teams", &other.admin_key, json!({ "name": "gamma" }))
            .await,
        201,
    )
    .await;
});

db_test!(a_team_with_agents_cannot_be_deleted, |app| {
    let tenant = app.new_tenant("starter").await;
    let agent = app
        .register_agent(&tenant.admin_key, json!({ "name": "bot", "team": "ops" }))
        .await;
    let team_id = agent["team_id"].as_str().unwrap();
    expect_error(
        app.delete(&format!("/teams/{team_id}"), &tenant.admin_key)
            .await,
        409,
        "team_has_agents",
    )
    .await;

    // Renaming the team shows on its agents.
    expect_status(
        app.patch(
            &format!("/teams/{team_id}"),
            &tenant.admin_key,
            json!({ "name": "sre" }),
        )
        .await,
        200,
    )
    .await;
    let agent_id = agent["id"].as_str().unwrap();
    let read = expect_status(
        app.get(&format!("/agents/{agent_id}"), &tenant.admin_key)
            .await,
        200,
    )
    .await;
    assert_eq!(read["data"]["team"], json!("sre"));

    expect_status(
        app.delete(&format!("/agents/{agent_id}"), &tenant.admin_key)
            .await,
        204,
    )
    .await;
    expect_status(
        app.delete(&format!("/teams/{team_id}"), &tenant.admin_key)
            .await,
        204,
    )
    .await;
    expect_error(
        app.get(&format!("/teams/{team_id}"), &tenant.admin_key)
            .await,
        404,
        "not_found",
    )
    .await;
    // A deleted team's name is free again.
    expect_status(
        app.post("/teams", &tenant.admin_key, json!({ "name": "sre" }))
            .await,
        201,
    )
    .await;

    let events = app.audit_events(&tenant.id, team_id).await;
    assert_eq!(events, ["team.created", "team.updated", "team.deleted"]);
});
