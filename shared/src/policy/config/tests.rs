//! Policy configs as the API takes them and as they are stored.

use super::*;
use crate::policy::Releases;

#[test]
fn configs_parse_with_defaults_and_render_back() {
    let budget = PolicyConfig::from_json(
        PolicyType::BudgetLimit,
        &json!({ "monthly_limit_usd": 12.5 }),
    );
    assert_eq!(
        budget.as_ref().map(PolicyConfig::to_json).ok(),
        Some(
            json!({ "monthly_limit_usd": 12.5, "warn_threshold_pct": 80, "block_threshold_pct": 100 })
        )
    );
    let limit =
        PolicyConfig::from_json(PolicyType::RateLimit, &json!({ "requests_per_minute": 60 }));
    assert_eq!(
        limit.map(|c| c.to_json()).ok(),
        Some(json!({ "requests_per_minute": 60, "tokens_per_minute": null, "per": "agent" }))
    );
    let approval = PolicyConfig::from_json(
        PolicyType::RequireApproval,
        &json!({ "environments": ["production"], "providers": ["openai", "openai"] }),
    );
    assert_eq!(
        approval.map(|c| c.to_json()).ok(),
        Some(
            json!({ "models": [], "providers": ["openai"], "environments": ["production"], "releases": "scope" })
        )
    );
}

#[test]
fn an_approval_releases_the_action_for_tools_and_the_scope_for_models_unless_told() {
    let releases = |v: Value| match PolicyConfig::from_json(PolicyType::RequireApproval, &v) {
        Ok(PolicyConfig::RequireApproval(matcher)) => Some(matcher.releases()),
        _ => None,
    };
    assert_eq!(
        releases(json!({ "tools": ["gh__delete_branch"] })),
        Some(Releases::Action)
    );
    assert_eq!(
        releases(json!({ "models": ["gpt-4o"] })),
        Some(Releases::Scope)
    );
    assert_eq!(
        releases(json!({ "models": ["gpt-4o"], "releases": "action" })),
        Some(Releases::Action)
    );
    assert_eq!(
        releases(json!({ "tools": ["gh__*"], "releases": "action_repeatable" })),
        Some(Releases::ActionRepeatable)
    );
    assert_eq!(releases(json!({ "releases": "forever" })), None);
    let review = PolicyConfig::from_json(
        PolicyType::RequireHumanReview,
        &json!({ "releases": "action" }),
    );
    assert_eq!(
        review.err().map(|e| e.field).as_deref(),
        Some("config.releases")
    );
}

#[test]
fn guardrails_default_to_every_detector_and_block() {
    let config = PolicyConfig::from_json(PolicyType::Guardrail, &json!({})).unwrap();
    let rendered = config.to_json();
    assert_eq!(rendered["action"], json!("block"));
    assert_eq!(
        rendered["detectors"].as_array().unwrap().len(),
        Detector::ALL.len()
    );
    let custom = PolicyConfig::from_json(
        PolicyType::Guardrail,
        &json!({ "action": "redact", "detectors": [],
                 "patterns": [{ "id": "employee_id", "pattern": "EMP-[0-9]{6}" }] }),
    )
    .unwrap();
    assert_eq!(
        custom.to_json(),
        json!({ "action": "redact", "detectors": [],
                "patterns": [{ "id": "employee_id", "pattern": "EMP-[0-9]{6}" }] })
    );
    let field = |v: Value| {
        PolicyConfig::from_json(PolicyType::Guardrail, &v)
            .err()
            .map(|e| e.field)
    };
    assert_eq!(
        field(json!({ "detectors": [] })).as_deref(),
        Some("config.detectors")
    );
    assert_eq!(
        field(json!({ "patterns": [{ "id": "email", "pattern": "x" }] })).as_deref(),
        Some("config.patterns[0].id")
    );
    assert_eq!(
        field(json!({ "patterns": [{ "id": "p", "pattern": "(" }] })).as_deref(),
        Some("config.patterns[0].pattern")
    );
    assert_eq!(
        field(json!({ "action": "ignore" })).as_deref(),
        Some("config")
    );
    assert_eq!(
        field(json!({ "detectors": ["dna"] })).as_deref(),
        Some("config")
    );
}

#[test]
fn bad_configs_name_their_field() {
    let field = |t, v: Value| PolicyConfig::from_json(t, &v).err().map(|e| e.field);
    let allowlist = PolicyType::ModelAllowlist;
    assert_eq!(
        field(allowlist, json!({ "allowed_models": [] })).as_deref(),
        Some("config.allowed_models")
    );
    assert_eq!(
        field(allowlist, json!({ "allowed_models": ["a*b"] })).as_deref(),
        Some("config.allowed_models")
    );
    assert_eq!(
        field(allowlist, json!({ "models": ["x"] })).as_deref(),
        Some("config")
    );
    assert_eq!(field(allowlist, json!(["x"])).as_deref(), Some("config"));
    assert_eq!(
        field(PolicyType::BlockProvider, json!({ "providers": ["Acme"] })).as_deref(),
        Some("config")
    );
    assert_eq!(
        field(PolicyType::BudgetLimit, json!({ "monthly_limit_usd": -1 })).as_deref(),
        Some("config.monthly_limit_usd")
    );
    assert_eq!(
        field(
            PolicyType::BudgetLimit,
            json!({ "monthly_limit_usd": 1, "block_threshold_pct": 201 })
        )
        .as_deref(),
        Some("config.block_threshold_pct")
    );
    assert_eq!(
        field(PolicyType::RateLimit, json!({})).as_deref(),
        Some("config")
    );
    assert_eq!(
        field(PolicyType::RateLimit, json!({ "tokens_per_minute": 0 })).as_deref(),
        Some("config.tokens_per_minute")
    );
    assert_eq!(
        field(
            PolicyType::RequireHumanReview,
            json!({ "environments": ["prod"] })
        )
        .as_deref(),
        Some("config.environments")
    );
    assert!(check_scope(
        PolicyType::BudgetLimit,
        &Scope::Environment("production".into())
    )
    .is_err());
    assert!(check_scope(PolicyType::BudgetLimit, &Scope::Team("tm_1".into())).is_ok());
    assert_eq!(
        field(PolicyType::ToolAllowlist, json!({ "allowed_tools": [] })).as_deref(),
        Some("config.allowed_tools")
    );
    assert_eq!(
        field(
            PolicyType::RequireApproval,
            json!({ "tools": ["a__b"], "models": ["gpt-4o"] })
        )
        .as_deref(),
        Some("config.tools")
    );
    assert_eq!(
        field(
            PolicyType::RateLimit,
            json!({ "tokens_per_minute": 5, "tools": ["a__*"] })
        )
        .as_deref(),
        Some("config.tokens_per_minute")
    );
}

#[test]
fn tool_configs_render_their_tools_and_model_configs_stay_as_they_were() {
    let render = |t, v: Value| PolicyConfig::from_json(t, &v).map(|c| c.to_json()).ok();
    assert_eq!(
        render(
            PolicyType::BlockTool,
            json!({ "tools": ["github__delete*"] })
        ),
        Some(json!({ "tools": ["github__delete*"] }))
    );
    assert_eq!(
        render(
            PolicyType::RequireApproval,
            json!({ "tools": ["github__create_issue"] })
        ),
        Some(
            json!({ "models": [], "providers": [], "environments": [], "tools": ["github__create_issue"], "releases": "action" })
        )
    );
    assert_eq!(
        render(
            PolicyType::RateLimit,
            json!({ "requests_per_minute": 5, "tools": ["docs__search"] })
        ),
        Some(
            json!({ "requests_per_minute": 5, "tokens_per_minute": null, "per": "agent", "tools": ["docs__search"] })
        )
    );
}
