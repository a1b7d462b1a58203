//! Creates a tenant with COUNT proxy keys through the management API and writes the raw
//! keys, one per line, to FILE (the load generator picks from them), and the tenant's
//! admin key and the agent's id to FILE.tenant (`ADMIN=...`, `AGENT=...`, for the
//! script's run with policies).
//!
//! Run: `seed-keys http://127.0.0.1:8080 <platform-admin key> 10000 keys.txt`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let base = args.next().expect("control plane URL");
    let platform_key = args.next().expect("platform-admin key");
    let count: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(10_000);
    let file = args.next().unwrap_or_else(|| "keys.txt".to_owned());
    let client = reqwest::Client::new();
    let api = format!("{base}/api/v1");
    let tenant: Value = client
        .post(format!("{api}/admin/tenants"))
        .bearer_auth(&platform_key)
        .json(
            &json!({ "company_name": "Load test", "owner_email": "load@example.com",
                       "plan": "enterprise_plus", "agent_limit": count + 10 }),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let admin = tenant["data"]["api_key"]
        .as_str()
        .expect("tenant created")
        .to_owned();
    // One agent carries every key, so the registry does not grow with the key count.
    let agent: Value = client
        .post(format!("{api}/agents"))
        .bearer_auth(&admin)
        .json(&json!({ "name": "load-agent" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let agent_id = agent["data"]["id"].as_str().unwrap().to_owned();
    let mut keys = Vec::with_capacity(count);
    let mut pending = tokio::task::JoinSet::new();
    for i in 0..count {
        let (client, api, admin, agent_id) =
            (client.clone(), api.clone(), admin.clone(), agent_id.clone());
        pending.spawn(async move {
            let created: Value = client
                .post(format!("{api}/proxy-keys"))
                .bearer_auth(&admin)
                .json(&json!({ "developer_label": format!("load-{i}"), "agent_id": agent_id }))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            created["data"]["raw_key"]
                .as_str()
                .expect("key created")
                .to_owned()
        });
        if pending.len() >= 8 {
            keys.push(pending.join_next().await.unwrap().unwrap());
        }
    }
    while let Some(key) = pending.join_next().await {
        keys.push(key.unwrap());
    }
    std::fs::write(&file, keys.join("\n") + "\n").unwrap();
    std::fs::write(
        format!("{file}.tenant"),
        format!("ADMIN={admin}\nAGENT={agent_id}\n"),
    )
    .unwrap();
    println!("{} proxy keys written to {file}", keys.len());
}
