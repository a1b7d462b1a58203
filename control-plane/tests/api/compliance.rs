//! EU AI Act compliance: impact assessments (versions, submit once), incidents (Art. 73
//! deadlines, responses, the closed state), evidence packs (plan gate, contents, hashes),
//! readiness rising with real records, and the transparency card.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::helpers::{create_policy, expect_error, expect_status, TestApp};

fn fria_body(tag: &str) -> Value {
    json!({
        "processes": format!("Screens loan applications ({tag})"),
        "frequency_and_scope": "Continuously, every application in the EU",
        "categories_of_persons": "Loan applicants",
        "specific_risks": "Discrimination by proxy variables",
        "human_oversight_measures": "A credit officer approves every refusal",
        "risk_mitigation_measures": "Quarterly bias audits; complaints desk",
    })
}

db_test!(assessments_are_versioned_and_submitted_once, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let agent = app
        .register_agent(key, json!({ "name": "loan-screener" }))
        .await;
    let agent_id = agent["id"].as_str().unwrap();
    let path = format!("/agents/{agent_id}/fria");
    expect_error(app.get(&path, key).await, 404, "not_found").await;

    let mut missing = fria_body("v0");
    missing.as_object_mut().unwrap().remove("specific_risks");
    expect_error(
        app.post(&path, key, missing).await,
        422,
        "validation_failed",
    )
    .await;
    let mut empty = fria_body("v0");
    empty["processes"] = json!("");
    expect_error(app.post(&path, key, empty).await, 422, "validation_failed").await;
    assert_eq!(app.count_rows("frias", &tenant.id).await, 0);

    let first =
        expect_status(app.post(&path, key, fria_body("v1")).await, 201).await["data"].clone();
    assert_eq!(
        (first["version"].clone(), first["status"].clone()),
        (json!(1), json!("draft"))
    );
    let second =
        expect_status(app.post(&path, key, fria_body("v2")).await, 201).await["data"].clone();
    assert_eq!(second["version"], 2);
    let newest = expect_status(app.get(&path, key).await, 200).await["data"].clone();
    assert_eq!(newest["id"], second["id"]);
    assert_eq!(newest["processes"], "Screens loan applications (v2)");
    let versions: Vec<i64> = newest["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_i64().unwrap())
        .collect();
    assert_eq!(versions, [2, 1]);

    let submit = format!("/fria/{}/submit", second["id"].as_str().unwrap());
    assert_eq!(
        app.post(&submit, key, json!({})).await.status().as_u16(),
        204
    );
    expect_error(
        app.post(&submit, key, json!({})).await,
        409,
        "fria_already_submitted",
    )
    .await;
    let submitted = expect_status(app.get(&path, key).await, 200).await["data"].clone();
    assert_eq!(submitted["status"], "submitted");
    assert!(submitted["submitted_at"].is_string());

    let other = app.new_tenant("starter").await;
    expect_error(app.get(&path, &other.admin_key).await, 404, "not_found").await;
    expect_error(
        app.post(&submit, &other.admin_key, json!({})).await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        app.post("/agents/agt_nope/fria", key, fria_body("x")).await,
        404,
        "not_found",
    )
    .await;
    let reader = app.key_with_scopes(&tenant, &["governance:read"]).await;
    expect_status(app.get(&path, &reader).await, 200).await;
    expect_error(
        app.post(&path, &reader, fria_body("x")).await,
        403,
        "insufficient_scope",
    )
    .await;

    let trail = app
        .audit_events(&tenant.id, second["id"].as_str().unwrap())
        .await;
    assert_eq!(trail, ["fria.created", "fria.submitted"]);
});

db_test!(
    incidents_carry_their_article_73_deadline_and_every_response,
    |app| {
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let agent = app
            .register_agent(key, json!({ "name": "triage-bot" }))
            .await;
        let agent_id = agent["id"].as_str().unwrap();
        let report = |extra: Value| {
            let mut body = json!({
                "agent_id": agent_id, "title": "Wrong triage advice", "severity": "critical",
                "description": "Advised a patient to stay home", "impact": "One hospitalisation",
                "affected_persons_count": 1,
            });
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            body
        };
        let death = expect_status(
            app.post(
                "/incidents",
                key,
                report(json!({"involves_health_or_death": true})),
            )
            .await,
            201,
        )
        .await["data"]
            .clone();
        assert_eq!(death["status"], "open");
        assert_eq!(death["reporting"]["deadline_days"], 10);
        assert_eq!(death["reporting"]["basis"], "art_73_4_death");
        assert_eq!(death["reporting"]["status"], "pending");
        let infrastructure = expect_status(
            app.post(
                "/incidents",
                key,
                report(json!({"critical_infrastructure": true})),
            )
            .await,
            201,
        )
        .await["data"]
            .clone();
        assert_eq!(infrastructure["reporting"]["deadline_days"], 2);
        let general = expect_status(app.post("/incidents", key, report(json!({}))).await, 201)
            .await["data"]
            .clone();
        assert_eq!(general["reporting"]["deadline_days"], 15);

        for bad in [
            json!({"agent_id": "agt_missing"}),
            json!({"severity": "catastrophic"}),
            json!({"affected_persons_count": -1}),
            json!({"title": ""}),
        ] {
            let response = app.post("/incidents", key, report(bad.clone())).await;
            assert_eq!(response.status().as_u16(), 422, "{bad}");
        }
        assert_eq!(app.count_rows("incidents", &tenant.id).await, 3);

        // Eleven days on, the death incident is overdue; notifying now is late.
        app.clock.advance(11 * 86_400_000);
        let path = format!("/incidents/{}", death["id"].as_str().unwrap());
        let read = expect_status(app.get(&path, key).await, 200).await["data"].clone();
        assert_eq!(read["reporting"]["overdue"], true);
        assert_eq!(read["reporting"]["status"], "overdue");
        let listed = expect_status(app.get("/incidents?status=open", key).await, 200).await;
        assert_eq!(listed["meta"]["total"], 3);

        expect_error(
            app.patch(&path, key, json!({})).await,
            422,
            "validation_failed",
        )
        .await;
        let updated = expect_status(
        app.patch(&path, key, json!({"status": "mitigated", "update_note": "Advice rule fixed", "authority_notified": true})).await,
        200,
    )
    .await["data"]
        .clone();
        assert_eq!(updated["status"], "mitigated");
        assert_eq!(updated["authority_notified"], true);
        assert_eq!(updated["reporting"]["status"], "late");
        assert_eq!(updated["updates"][0]["note"], "Advice rule fixed");
        expect_error(
            app.patch(&path, key, json!({"authority_notified": false}))
                .await,
            422,
            "validation_failed",
        )
        .await;
        expect_status(
            app.patch(&path, key, json!({"status": "closed"})).await,
            200,
        )
        .await;
        expect_error(
            app.patch(&path, key, json!({"update_note": "again"})).await,
            409,
            "incident_closed",
        )
        .await;
        let trail = app
            .audit_events(&tenant.id, death["id"].as_str().unwrap())
            .await;
        assert_eq!(
            trail,
            ["incident.created", "incident.updated", "incident.updated"]
        );

        let other = app.new_tenant("starter").await;
        expect_error(app.get(&path, &other.admin_key).await, 404, "not_found").await;
    }
);

db_test!(
    evidence_packs_need_professional_and_hash_what_they_quote,
    |app| {
        let starter = app.new_tenant("starter").await;
        let agent = app
            .register_agent(&starter.admin_key, json!({ "name": "x" }))
            .await;
        let incident = expect_status(
            app.post(
                "/incidents",
                &starter.admin_key,
                json!({
            "agent_id": agent["id"], "title": "t", "severity": "low", "description": "d"}),
            )
            .await,
            201,
        )
        .await["data"]
            .clone();
        let pack_path = format!(
            "/incidents/{}/evidence-pack",
            incident["id"].as_str().unwrap()
        );
        expect_error(
            app.get(&pack_path, &starter.admin_key).await,
            402,
            "plan_upgrade_required",
        )
        .await;

        let tenant = app.new_tenant("professional").await;
        let key = &tenant.admin_key;
        let agent = app
            .register_agent(key, json!({ "name": "claims-bot" }))
            .await;
        let agent_id = agent["id"].as_str().unwrap();
        expect_status(
            app.post(
                &format!("/agents/{agent_id}/block"),
                key,
                json!({"reason": "bad payouts"}),
            )
            .await,
            204,
        )
        .await;
        expect_status(
            app.post(&format!("/agents/{agent_id}/fria"), key, fria_body("pack"))
                .await,
            201,
        )
        .await;
        let incident = expect_status(
            app.post(
                "/incidents",
                key,
                json!({
            "agent_id": agent_id, "title": "Wrong payouts", "severity": "high",
            "description": "Paid claims it should have refused"}),
            )
            .await,
            201,
        )
        .await["data"]
            .clone();
        let incident_id = incident["id"].as_str().unwrap();
        let pack_path = format!("/incidents/{incident_id}/evidence-pack");
        for bad in ["0", "169", "x"] {
            let response = app
                .get(&format!("{pack_path}?window_hours={bad}"), key)
                .await;
            assert_eq!(response.status().as_u16(), 422, "{bad}");
        }
        let pack = expect_status(
            app.get(&format!("{pack_path}?window_hours=48"), key).await,
            200,
        )
        .await["data"]
            .clone();
        assert_eq!(pack["incident"]["id"], incident_id);
        assert_eq!(pack["agent"]["id"], agent_id);
        assert_eq!(pack["agent"]["blocked"], true);
        assert_eq!(pack["fria"]["version"], 1);
        assert_eq!(pack["window"]["hours"], 48);
        let types: Vec<&str> = pack["audit_events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event_type"].as_str().unwrap())
            .collect();
        assert!(
            types.contains(&"agent.registered") && types.contains(&"agent.blocked"),
            "{types:?}"
        );
        assert!(types.contains(&"incident.created"), "{types:?}");
        assert!(pack["audit_events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["hash"].as_str().is_some_and(|h| h.len() == 64)));
        assert_eq!(pack["usage"]["requests"], 0);
        assert_eq!(pack["reporting"]["deadline_days"], 15);

        // The chain head it names is the chain's, and its own hash recomputes.
        let verify =
            expect_status(app.get("/audit-trail/verify", key).await, 200).await["data"].clone();
        assert_eq!(verify["valid"], true);
        assert_eq!(pack["audit_chain"]["seq"], verify["head"]["seq"]);
        assert_eq!(pack["audit_chain"]["hash"], verify["head"]["hash"]);
        let mut body = pack.clone();
        let claimed = body.as_object_mut().unwrap().remove("pack_sha256").unwrap();
        let digest: String = Sha256::digest(body.to_string().as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(claimed, json!(digest));
    }
);

async fn readiness(app: &TestApp, key: &str) -> Value {
    expect_status(app.get("/compliance/readiness", key).await, 200).await["data"].clone()
}

fn component(readiness: &Value, name: &str) -> Value {
    readiness["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap()
        .clone()
}

db_test!(
    readiness_rises_as_the_tenant_adds_records,
    |config| {
        config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()];
    },
    |app| {
        let tenant = app.new_tenant("starter").await;
        let key = &tenant.admin_key;
        let empty = readiness(&app, key).await;
        assert_eq!(empty["max_score"], 100);
        assert_eq!(empty["components"].as_array().unwrap().len(), 7);
        assert_eq!(component(&empty, "agent_registry")["status"], "missing");
        assert_eq!(empty["rating"], "not_ready");

        let agent = app
            .register_agent(key, json!({ "name": "hr-screener" }))
            .await;
        let agent_id = agent["id"].as_str().unwrap();
        let before = readiness(&app, key).await;
        assert_eq!(component(&before, "risk_classification")["score"], 0);
        assert_eq!(component(&before, "fria_completion")["score"], 0);
        assert!(
            before["recommendations"].as_array().unwrap().len() >= 4,
            "{before}"
        );

        expect_status(
            app.post(
                &format!("/agents/{agent_id}/risk-classification"),
                key,
                json!({"risk_level": "high", "justification": "Annex III employment"}),
            )
            .await,
            201,
        )
        .await;
        expect_status(
            app.post(
                &format!("/agents/{agent_id}/owners"),
                key,
                json!({"owner_type": "user", "owner_id": "ana", "owner_name": "Ana"}),
            )
            .await,
            201,
        )
        .await;
        create_policy(
            &app,
            key,
            json!({"name": "approve all", "policy_type": "require_approval", "config": {}}),
        )
        .await;
        let fria = expect_status(
            app.post(&format!("/agents/{agent_id}/fria"), key, fria_body("hr"))
                .await,
            201,
        )
        .await["data"]
            .clone();
        expect_status(
            app.post(
                &format!("/fria/{}/submit", fria["id"].as_str().unwrap()),
                key,
                json!({}),
            )
            .await,
            204,
        )
        .await;
        expect_status(
            app.post(
                "/notifications/channels",
                key,
                json!({
        "name": "dpo", "channel_type": "webhook", "events": ["incident.created"],
        "config": {"url": "http://127.0.0.1:9/"}}),
            )
            .await,
            201,
        )
        .await;

        let after = readiness(&app, key).await;
        for name in [
            "agent_registry",
            "risk_classification",
            "governance_policies",
            "human_oversight",
            "audit_trail",
            "fria_completion",
            "incident_readiness",
        ] {
            assert_eq!(
                component(&after, name)["status"],
                "complete",
                "{name}: {after}"
            );
        }
        assert_eq!(after["total_score"], 100);
        assert_eq!(after["rating"], "ready");
        assert!(after["recommendations"].as_array().unwrap().is_empty());
        assert!(after["total_score"].as_i64() > before["total_score"].as_i64());
    }
);

db_test!(readiness_counts_each_agent_by_its_own_records, |app| {
    // Four agents that differ in team, owner, risk tier, FRIA and the policies covering
    // them (one by team, one naming a single agent): each component counts each agent.
    let tenant = app.new_tenant("enterprise").await;
    let key = &tenant.admin_key;
    let mut ids = Vec::new();
    for body in [
        json!({ "name": "r-1", "team": "claims" }),
        json!({ "name": "r-2", "team": "claims" }),
        json!({ "name": "r-3" }),
        json!({ "name": "r-4" }),
    ] {
        let agent = app.register_agent(key, body).await;
        ids.push(agent["id"].as_str().unwrap().to_owned());
    }
    for (agent, level) in [(0, "high"), (2, "minimal"), (3, "high")] {
        expect_status(
            app.post(
                &format!("/agents/{}/risk-classification", ids[agent]),
                key,
                json!({ "risk_level": level, "justification": "reviewed" }),
            )
            .await,
            201,
        )
        .await;
    }
    expect_status(
        app.post(
            &format!("/agents/{}/owners", ids[0]),
            key,
            json!({ "owner_type": "user", "owner_id": "ana", "owner_name": "Ana" }),
        )
        .await,
        201,
    )
    .await;
    let fria = expect_status(
        app.post(&format!("/agents/{}/fria", ids[0]), key, fria_body("r1"))
            .await,
        201,
    )
    .await;
    let fria_id = fria["data"]["id"].as_str().unwrap();
    expect_status(
        app.post(&format!("/fria/{fria_id}/submit"), key, json!({}))
            .await,
        204,
    )
    .await;
    let teams = expect_status(app.get("/teams", key).await, 200).await;
    let claims = teams["data"][0]["id"].as_str().unwrap();
    create_policy(
        &app,
        key,
        json!({
            "name": "claims models", "policy_type": "model_allowlist",
            "config": { "allowed_models": ["gpt-4o"] }, "scope": format!("team:{claims}"),
        }),
    )
    .await;
    create_policy(
        &app,
        key,
        json!({
            "name": "r-3 approval", "policy_type": "require_approval",
            "config": { "models": ["gpt-4o"] }, "scope": format!("agent:{}", ids[2]),
        }),
    )
    .await;

    let found = readiness(&app, key).await;
    let evidence = |name: &str| component(&found, name)["evidence"].clone();
    assert_eq!(
        evidence("agent_registry"),
        json!({ "live_agents": 4, "with_owner_or_team": 2 })
    );
    assert_eq!(
        evidence("risk_classification"),
        json!({ "live_agents": 4, "classified": 3 })
    );
    assert_eq!(
        evidence("governance_policies"),
        json!({ "enabled_policies": 2, "agents_covered": 3, "live_agents": 4 })
    );
    assert_eq!(
        evidence("human_oversight"),
        json!({ "agents_considered": 2, "considered": "high_risk_agents",
                "with_human_oversight_policy": 0 })
    );
    assert_eq!(
        evidence("fria_completion"),
        json!({ "high_risk_or_unclassified_agents": 3, "with_submitted_fria": 1 })
    );
    assert_eq!(component(&found, "agent_registry")["score"], 5);
    assert_eq!(component(&found, "governance_policies")["score"], 11);
});

db_test!(the_transparency_card_is_generated_from_the_records, |app| {
    let tenant = app.new_tenant("starter").await;
    let key = &tenant.admin_key;
    let agent = app.register_agent(key, json!({
        "name": "support-bot", "description": "Answers customer questions", "framework": "langgraph",
        "tags": {"capabilities": "Answers billing questions; Looks up orders", "data_sources": "Help-centre articles"}
    })).await;
    let agent_id = agent["id"].as_str().unwrap();
    let path = format!("/agents/{agent_id}/transparency-card");
    let card = expect_status(app.get(&path, key).await, 200).await["data"].clone();
    assert_eq!(card["agent_name"], "support-bot");
    assert_eq!(card["purpose"], "Answers customer questions");
    assert_eq!(card["framework"], "langgraph");
    assert_eq!(card["risk_level"], "unclassified");
    assert_eq!(card["disclosure"], Value::Null);
    assert_eq!(card["data_sources"], "Help-centre articles");
    assert_eq!(
        card["capabilities"],
        json!(["Answers billing questions", "Looks up orders"])
    );
    assert_eq!(
        card["human_oversight"],
        "No human approval or review policy covers this agent."
    );

    expect_status(
        app.post(
            &format!("/agents/{agent_id}/risk-classification"),
            key,
            json!({"risk_level": "limited", "justification": "Chatbot: Art. 50"}),
        )
        .await,
        201,
    )
    .await;
    create_policy(
        &app,
        key,
        json!({"name": "review refunds", "policy_type": "require_approval", "config": {}}),
    )
    .await;
    let card = expect_status(app.get(&path, key).await, 200).await["data"].clone();
    assert_eq!(card["risk_level"], "limited");
    assert!(
        card["disclosure"].as_str().unwrap().contains("Article 50"),
        "{card}"
    );
    assert!(
        card["human_oversight"]
            .as_str()
            .unwrap()
            .contains("review refunds"),
        "{card}"
    );
    expect_error(
        app.get("/agents/agt_missing/transparency-card", key).await,
        404,
        "not_found",
    )
    .await;
});
