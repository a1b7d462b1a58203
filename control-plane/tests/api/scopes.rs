//! Scope enforcement on every route, driven by the OpenAPI document.
//!
//! Each operation declares its scope in its security requirement. For every operation
//! this test proves that a key holding every scope but that one (and not `admin`) is
//! refused with 403, and that a key holding exactly that scope gets past the check.

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::{expect_status, platform_key, TestApp, TestTenant};

/// Operations that need no credential at all.
const PUBLIC: &[(&str, &str)] = &[
    ("post", "/api/v1/auth/signup"),
    ("post", "/api/v1/auth/login"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    // Authenticated by the payment provider's signature instead of a key.
    ("post", "/api/v1/billing/webhook"),
    // The SAML service provider: browsers and the IdP reach it; the ACS is authenticated
    // by the IdP's signature.
    ("get", "/api/v1/sso/{tenant_id}/saml/metadata"),
    ("get", "/api/v1/sso/{tenant_id}/saml/login"),
    ("post", "/api/v1/sso/{tenant_id}/saml/acs"),
];

const TENANT_SCOPES: &[&str] = &[
    "registry:read",
    "registry:write",
    "telemetry:write",
    "monitoring:read",
    "cost:read",
    "anomaly:read",
    "anomaly:write",
    "governance:read",
    "governance:write",
    "proxy:forward",
    "payload:read",
    "payload:write",
];

/// The requirement of internal routes: the service token, which no tenant key satisfies.
pub const SERVICE: &str = "<service token>";

pub struct Operation {
    pub method: String,
    pub path: String,
    /// `None`: public. `Some(None)`: any credential. `Some(Some(scope))`: that scope.
    pub requirement: Option<Option<String>>,
}

pub async fn operations(app: &TestApp) -> Vec<Operation> {
    let doc = app.openapi().await;
    let mut operations = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let requirement = operation.get("security").map(|security| {
                if security[0].get("service_token").is_some() {
                    return Some(SERVICE.to_owned());
                }
                let scopes = security[0]["bearer"].as_array().unwrap();
                assert!(scopes.len() <= 1, "{method} {path} must declare one scope");
                scopes.first().map(|s| s.as_str().unwrap().to_owned())
            });
            operations.push(Operation {
                method: method.clone(),
                path: path.clone(),
                requirement,
            });
        }
    }
    operations
}

/// The path with every `{param}` replaced by an id that exists nowhere.
fn concrete(path: &str) -> String {
    path.replace("{agent_id}", "agt_01AAAAAAAAAAAAAAAAAAAAAAAA")
        .replace("{team_id}", "team_01AAAAAAAAAAAAAAAAAAAAAAAA")
        .replace("{key_id}", "key_01AAAAAAAAAAAAAAAAAAAAAAAA")
        .replace("{tenant_id}", "ten_01AAAAAAAAAAAAAAAAAAAAAAAA")
        .replace("{api_key_id}", "key_01AAAAAAAAAAAAAAAAAAAAAAAA")
        .replace("{managed_key_id}", "mk_01AAAAAAAAAAAAAAAAAAAAAAAA")
}

async fn call(app: &TestApp, op: &Operation, key: Option<&str>) -> reqwest::Response {
    let method = Method::from_bytes(op.method.to_uppercase().as_bytes()).unwrap();
    let url = format!("{}{}", app.base, concrete(&op.path));
    let mut request = app.client.request(method.clone(), url);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if method == Method::POST || method == Method::PATCH || method == Method::PUT {
        request = request.json(&json!({}));
    }
    request.send().await.unwrap()
}

async fn key_without(app: &TestApp, tenant: &TestTenant, scope: &str) -> String {
    if scope == "platform:admin" {
        return tenant.admin_key.clone();
    }
    let others: Vec<&str> = TENANT_SCOPES
        .iter()
        .copied()
        .filter(|s| *s != scope)
        .collect();
    app.key_with_scopes(tenant, &others).await
}

async fn key_with(app: &TestApp, tenant: &TestTenant, scope: &str) -> String {
    if scope == "platform:admin" {
        return platform_key().to_owned();
    }
    app.key_with_scopes(tenant, &[scope]).await
}

db_test!(every_route_rejects_a_key_without_its_scope, |app| {
    let tenant = app.new_tenant("enterprise").await;
    let operations = operations(&app).await;
    assert!(operations.len() >= 20, "the document lists the routes");
    let mut public = Vec::new();
    for op in &operations {
        match &op.requirement {
            None => public.push((op.method.as_str(), op.path.as_str())),
            Some(None) => {
                let response = call(&app, op, None).await;
                assert_eq!(
                    response.status(),
                    401,
                    "{} {} without a key",
                    op.method,
                    op.path
                );
            }
            Some(Some(scope)) if scope == SERVICE => {
                for key in [tenant.admin_key.as_str(), platform_key()] {
                    let response = call(&app, op, Some(key)).await;
                    assert_eq!(
                        response.status(),
                        401,
                        "{} {} accepted a tenant key",
                        op.method,
                        op.path
                    );
                }
                let status = call(&app, op, Some(crate::helpers::SERVICE_TOKEN))
                    .await
                    .status()
                    .as_u16();
                assert!(
                    status != 401 && status != 403,
                    "{} {} refused the service token",
                    op.method,
                    op.path
                );
            }
            Some(Some(scope)) => {
                let lacking = key_without(&app, &tenant, scope).await;
                let response = call(&app, op, Some(&lacking)).await;
                let status = response.status().as_u16();
                let body: Value = response.json().await.unwrap();
                assert_eq!(
                    status, 403,
                    "{} {} accepted a key without `{scope}`: {body}",
                    op.method, op.path
                );
                assert_eq!(body["error"]["code"], json!("insufficient_scope"));
                assert_eq!(body["error"]["details"]["required_scope"], json!(scope));

                let holding = key_with(&app, &tenant, scope).await;
                let response = call(&app, op, Some(&holding)).await;
                let status = response.status().as_u16();
                assert!(
                    status != 401 && status != 403,
                    "{} {} refused a key with `{scope}`: {status}",
                    op.method,
                    op.path
                );
                let response = call(&app, op, None).await;
                assert_eq!(
                    response.status(),
                    401,
                    "{} {} without a key",
                    op.method,
                    op.path
                );
            }
        }
    }
    public.sort();
    let mut expected = PUBLIC.to_vec();
    expected.sort();
    assert_eq!(
        public, expected,
        "only signup, login, the probes and the signed billing webhook are public"
    );
});

db_test!(admin_satisfies_every_tenant_scope, |app| {
    let tenant = app.new_tenant("enterprise").await;
    for op in operations(&app).await {
        if let Some(Some(scope)) = &op.requirement {
            if scope != "platform:admin" && scope != SERVICE {
                let status = call(&app, &op, Some(&tenant.admin_key))
                    .await
                    .status()
                    .as_u16();
                assert!(
                    status != 401 && status != 403,
                    "{} {}: {status}",
                    op.method,
                    op.path
                );
            }
        }
    }
    let _ = expect_status;
});
