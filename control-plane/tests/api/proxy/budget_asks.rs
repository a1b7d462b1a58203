//! A proxy's asks for budgets' allowances (`warden_proxy::budget_grants`): the requests
//! of a scope whose allowance does not cover them, coming at once, wait for one ask.

use futures_util::future::join_all;
use serde_json::json;

use super::budgets::create_limit;
use super::{simple_chat, MockProvider, TestProxy};
use crate::helpers::metric;

/// The asks this proxy's requests have sent for budgets' allowances.
async fn asks(proxy: &TestProxy) -> f64 {
    let series = "warden_proxy_budget_grant_asks_total";
    metric(&proxy.metrics().await, series).unwrap_or_else(|| panic!("{series} missing"))
}

/// Twenty requests of one key at once, all served.
async fn twenty_at_once(proxy: &TestProxy, key: &str) {
    let answers = join_all((0..20).map(|_| proxy.chat(key, simple_chat("gpt-4o"))));
    for answer in answers.await {
        assert_eq!(answer.status(), 200);
    }
}

db_test!(a_scopes_requests_at_once_share_one_ask, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (tenant, key, created) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "busy" }))
        .await;
    let admin = &tenant.admin_key;
    create_limit(&app, admin, json!({ "monthly_limit_usd": 100 })).await;
    assert_eq!(asks(&proxy).await, 0.0);

    // The tenant's budget, new: the first request asks, the others wait for its grant
    // (an eighth of the room, which covers them all).
    twenty_at_once(&proxy, &key).await;
    assert_eq!(asks(&proxy).await, 1.0);
    twenty_at_once(&proxy, &key).await;
    assert_eq!(asks(&proxy).await, 1.0);

    // A budget on the agent too: one more ask, for that scope alone.
    let agent_limit = json!({ "agent_id": created["agent_id"], "monthly_limit_usd": 100 });
    create_limit(&app, admin, agent_limit).await;
    twenty_at_once(&proxy, &key).await;
    assert_eq!(asks(&proxy).await, 2.0);
});
