//! TLS to a provider: verified against the configured CA, refused without it.

use serde_json::{json, Value};

use super::tls::TestCa;
use super::{simple_chat, MockProvider, TestProxy};

db_test!(providers_are_reached_over_verified_tls, |app| {
    let ca = TestCa::new();
    let provider = MockProvider::start_tls(&ca).await;
    let ca_file = ca.ca_file.clone();
    let proxy =
        TestProxy::start_with(&app, &provider, |config| config.ca_file = Some(ca_file)).await;
    let (_, raw_key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "tls" }))
        .await;
    let response = proxy.chat(&raw_key, simple_chat("gpt-4o-mini")).await;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        json!("Hello from the mock")
    );
    assert_eq!(provider.requests().len(), 1);

    // A proxy that does not trust the provider's CA refuses to talk to it.
    let untrusting = TestProxy::start(&app, &provider).await;
    let response = untrusting.chat(&raw_key, simple_chat("gpt-4o-mini")).await;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], json!("upstream_unreachable"));
    assert_eq!(
        provider.requests().len(),
        1,
        "an unverified provider got the request"
    );
});
