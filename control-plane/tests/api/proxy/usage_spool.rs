//! Usage survives a restart of the proxy: requests served while the control plane is
//! unreachable land in the ledger exactly once after the proxy is stopped (as by
//! SIGTERM) or killed (`kill -9`) and both planes are started again.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

use super::{eventually, simple_chat, stays, MockProvider, TestProxy, UPSTREAM_KEY};
use crate::helpers::{TestApp, SERVICE_TOKEN};
use crate::servers::{logged_port, ChildOutput};

const REQUESTS: usize = 30;

/// Spooled batches in `dir`.
fn spooled(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| entries.filter(|e| e.is_ok()).count())
        .unwrap_or(0)
}

/// Usage records in the batches spooled in `dir`.
fn spooled_records(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|body| serde_json::from_slice::<serde_json::Value>(&body).ok())
        .map(|batch| batch["records"].as_array().map_or(0, Vec::len))
        .sum()
}

/// Starts a proxy on the same spool after the control plane is back, and waits for the
/// ledger to hold exactly `expected` records of `tenant_id`, and to keep holding that.
async fn restarted_proxy_delivers(
    app: &TestApp,
    provider: &MockProvider,
    spool: &Path,
    tenant_id: &str,
    expected: i64,
) {
    let _proxy = TestProxy::start_with(app, provider, |config| {
        config.usage_spool_dir = spool.to_owned();
    })
    .await;
    eventually(Duration::from_secs(20), || async {
        (app.count_rows("usage_records", tenant_id).await == expected).then_some(())
    })
    .await;
    eventually(Duration::from_secs(5), || async {
        (spooled(spool) == 0).then_some(())
    })
    .await;
    stays(Duration::from_millis(300), "the record count", || async {
        app.count_rows("usage_records", tenant_id).await == expected
    })
    .await;
}

db_test!(
    usage_served_during_an_outage_survives_a_proxy_stopped_gracefully,
    |app| {
        let mut app = app;
        let spool = tempfile::tempdir().unwrap();
        let provider = MockProvider::start().await;
        let mut proxy = TestProxy::start_with(&app, &provider, |config| {
            config.usage_spool_dir = spool.path().to_owned();
        })
        .await;
        let (tenant, key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "spooled" }))
            .await;

        app.stop().await;
        for _ in 0..REQUESTS {
            let response = proxy.chat(&key, simple_chat("gpt-4o-mini")).await;
            assert_eq!(response.status(), 200);
        }
        proxy.stop().await;
        assert!(spooled(spool.path()) > 0, "the usage waits in the spool");

        app.start_again().await;
        restarted_proxy_delivers(&app, &provider, spool.path(), &tenant.id, REQUESTS as i64).await;
    }
);

// `warden proxy` itself, killed with SIGKILL: what its spool holds survives. The
// documented bound is what it took from its queue in the last flush interval (50 ms
// here), so the kill comes well after the last answer.
db_test!(usage_served_during_an_outage_survives_kill_9, |app| {
    let mut app = app;
    let spool = tempfile::tempdir().unwrap();
    let provider = MockProvider::start().await;
    let mut child = KillOnDrop(spawn_proxy_binary(&app, &provider, spool.path()));
    let log = ChildOutput::capture(&mut child.0);
    let port = logged_port(
        &log.line_with("proxy listening", Duration::from_secs(60))
            .await,
    );
    let proxy_base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    eventually(Duration::from_secs(30), || {
        let request = client.get(format!("{proxy_base}/healthz")).send();
        async move {
            let health: serde_json::Value = request.await.ok()?.json().await.ok()?;
            (health["status"] == "ok").then_some(())
        }
    })
    .await;
    let tenant = app.new_tenant("starter").await;
    let created = crate::helpers::expect_status(
        app.post(
            "/proxy-keys",
            &tenant.admin_key,
            json!({ "developer_label": "killed" }),
        )
        .await,
        201,
    )
    .await;
    let key = created["data"]["raw_key"].as_str().unwrap().to_owned();

    app.stop().await;
    for _ in 0..REQUESTS {
        let response = client
            .post(format!("{proxy_base}/v1/chat/completions"))
            .bearer_auth(&key)
            .json(&simple_chat("gpt-4o-mini"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    // Every record is in a batch on disk (the flush interval has passed).
    eventually(Duration::from_secs(5), || async {
        (spooled_records(spool.path()) == REQUESTS).then_some(())
    })
    .await;
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    assert!(spooled(spool.path()) > 0, "the usage waits in the spool");

    app.start_again().await;
    restarted_proxy_delivers(&app, &provider, spool.path(), &tenant.id, REQUESTS as i64).await;
});

/// `warden proxy` on a free port, which it logs ("proxy listening") on its stdout.
fn spawn_proxy_binary(app: &TestApp, provider: &MockProvider, spool: &Path) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
    command
        .arg("proxy")
        .env("WARDEN_PROXY__LISTEN", "127.0.0.1:0")
        .env("WARDEN_PROXY__CONTROL_PLANE_URL", &app.base)
        .env("WARDEN_PROXY__USAGE_SPOOL_DIR", spool)
        .env("WARDEN_PROXY__USAGE_FLUSH_INTERVAL_MS", "50")
        .env("WARDEN_PROXY__EVENT_LOOPS", "1")
        .env("WARDEN_SERVICE_TOKEN", SERVICE_TOKEN)
        .env("RUST_LOG", "warn,warden=info")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for provider_name in ["OPENAI", "ANTHROPIC", "GOOGLE", "NVIDIA", "BEDROCK"] {
        command
            .env(
                format!("WARDEN_PROVIDERS__{provider_name}__BASE_URL"),
                &provider.base,
            )
            .env(
                format!("WARDEN_PROVIDERS__{provider_name}__API_KEY"),
                UPSTREAM_KEY,
            );
    }
    command.spawn().unwrap()
}

/// The proxy process, killed if the test fails before it does.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
