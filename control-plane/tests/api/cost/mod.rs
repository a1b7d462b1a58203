//! Cost views against totals computed independently in the test: the views and their
//! queries (`views`), and the rollups behind them as ranges cut hours and days close
//! (`rollups`).

mod rollups;
mod views;

use serde_json::json;

use crate::helpers::{expect_status, TestApp, TestTenant};

pub const HOUR: i64 = 3_600_000;

pub async fn spend(
    app: &TestApp,
    tenant: &TestTenant,
    agent: &str,
    model: &str,
    cost: f64,
    tokens: (i64, i64),
) {
    expect_status(
        app.post(
            "/telemetry/usage",
            &tenant.admin_key,
            json!({ "agent_id": agent, "model_provider": "openai", "model_name": model,
                    "input_tokens": tokens.0, "output_tokens": tokens.1, "cost_usd": cost }),
        )
        .await,
        201,
    )
    .await;
}

pub fn day_of(ms: i64) -> String {
    warden_shared::timestamp::Timestamp::from_millis(ms).to_string()[..10].to_owned()
}
