//! A batch the ledger cannot take never holds back the batches behind it: usage of a
//! tenant deleted while it was on its way is dropped by the ledger (counted), and a batch
//! the ledger keeps failing on is set aside in the spool, counted, and replayed later with
//! `warden spool` exactly once.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{eventually, stays, MockProvider, TestProxy};
use crate::helpers::{create_policy, expect_status, platform_key, Backend, TestApp, SERVICE_TOKEN};

/// The value of `series` in `metrics`, 0 when it is not there yet.
fn metric(metrics: &str, series: &str) -> f64 {
    crate::helpers::metric(metrics, series).unwrap_or(0.0)
}

db_test!(
    a_tenant_deleted_with_usage_in_flight_holds_back_no_other_tenant,
    |app| {
        let provider = MockProvider::start().await;
        // Usage waits a second in the proxy: long enough to delete its tenant meanwhile.
        let proxy = TestProxy::start_with(&app, &provider, |config| {
            config.usage_flush_interval_ms = 1_000;
        })
        .await;
        let (doomed, doomed_key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "doomed" }))
            .await;
        // Governed: its records carry a policy decision (a result set of the tenant).
        create_policy(
            &app,
            &doomed.admin_key,
            json!({ "name": "allowed models", "policy_type": "model_allowlist",
                    "config": { "allowed_models": ["gpt-4o-mini*"] } }),
        )
        .await;
        let (other, other_key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "bystander" }))
            .await;
        let before = app.metrics().await;
        let dropped =
            "warden_ingest_records_dropped_total{kind=\"usage\",reason=\"tenant_deleted\"}";

        for _ in 0..3 {
            assert_eq!(proxy.chat_answer(&doomed_key, "gpt-4o-mini").await.0, 200);
        }
        expect_status(
            app.delete(&format!("/admin/tenants/{}", doomed.id), platform_key())
                .await,
            204,
        )
        .await;
        let sent = Instant::now();
        for _ in 0..5 {
            assert_eq!(proxy.chat_answer(&other_key, "gpt-4o-mini").await.0, 200);
        }
        eventually(Duration::from_secs(5), || async {
            (app.count_rows("usage_records", &other.id).await == 5).then_some(())
        })
        .await;
        let landed = sent.elapsed();
        assert!(landed < Duration::from_secs(2), "landed after {landed:?}");
        let after = app.metrics().await;
        assert_eq!(metric(&after, dropped) - metric(&before, dropped), 3.0);
        stays(Duration::from_millis(1_500), "five records", || async {
            app.count_rows("usage_records", &other.id).await == 5
        })
        .await;
        assert_eq!(app.count_rows("usage_records", &doomed.id).await, 0);
        let metrics = proxy.metrics().await;
        assert_eq!(
            metric(&metrics, "warden_proxy_usage_batches_set_aside_total"),
            0.0
        );
    }
);

/// Makes every insert of `tenant_id`'s usage records fail, as a ledger fault would.
async fn break_ledger_for(app: &TestApp, tenant_id: &str) -> String {
    let trigger = format!("fail_{}", tenant_id.to_lowercase());
    let statements = match app.backend {
        Backend::Sqlite => vec![format!(
            "CREATE TRIGGER {trigger} BEFORE INSERT ON usage_records \
             WHEN NEW.tenant_id = '{tenant_id}' BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
        )],
        Backend::Postgres => vec![
            format!(
                "CREATE FUNCTION {trigger}() RETURNS trigger AS $$ BEGIN \
                 IF NEW.tenant_id = '{tenant_id}' THEN RAISE EXCEPTION 'injected fault'; END IF; \
                 RETURN NEW; END $$ LANGUAGE plpgsql"
            ),
            format!(
                "CREATE TRIGGER {trigger} BEFORE INSERT ON usage_records \
                 FOR EACH ROW EXECUTE FUNCTION {trigger}()"
            ),
        ],
    };
    for statement in statements {
        sqlx::query(&statement)
            .execute(app.db.pool())
            .await
            .unwrap();
    }
    trigger
}

async fn mend_ledger(app: &TestApp, trigger: &str) {
    let statements = match app.backend {
        Backend::Sqlite => vec![format!("DROP TRIGGER {trigger}")],
        Backend::Postgres => vec![
            format!("DROP TRIGGER {trigger} ON usage_records"),
            format!("DROP FUNCTION {trigger}()"),
        ],
    };
    for statement in statements {
        sqlx::query(&statement)
            .execute(app.db.pool())
            .await
            .unwrap();
    }
}

/// Runs `warden spool <args>` on the spool folder `dir` against `app`.
fn warden_spool(app: &TestApp, dir: &Path, args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("spool")
        .args(args)
        .arg("--dir")
        .arg(dir)
        .env("WARDEN_PROXY__CONTROL_PLANE_URL", &app.base)
        .env("WARDEN_SERVICE_TOKEN", SERVICE_TOKEN)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

db_test!(
    a_batch_the_ledger_keeps_failing_is_set_aside_and_replayed_once,
    |app| {
        let provider = MockProvider::start().await;
        let spool = tempfile::tempdir().unwrap();
        let proxy = TestProxy::start_with(&app, &provider, |config| {
            config.usage_spool_dir = spool.path().to_owned();
        })
        .await;
        let (faulty, faulty_key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "faulty" }))
            .await;
        let (other, other_key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "bystander" }))
            .await;
        let trigger = break_ledger_for(&app, &faulty.id).await;
        for _ in 0..2 {
            assert_eq!(proxy.chat_answer(&faulty_key, "gpt-4o-mini").await.0, 200);
        }
        // The failing batch is on its way (failed once already); the other tenant's
        // usage queues behind it.
        eventually(Duration::from_secs(5), || async {
            let failures = metric(
                &proxy.metrics().await,
                "warden_proxy_usage_flush_failures_total",
            );
            (failures >= 1.0).then_some(())
        })
        .await;
        for _ in 0..3 {
            assert_eq!(proxy.chat_answer(&other_key, "gpt-4o-mini").await.0, 200);
        }
        // Five failures (about 4 s of retries), then the batch is set aside and the
        // other tenant's usage lands.
        eventually(Duration::from_secs(15), || async {
            (app.count_rows("usage_records", &other.id).await == 3).then_some(())
        })
        .await;
        let metrics = proxy.metrics().await;
        assert_eq!(
            metric(&metrics, "warden_proxy_usage_batches_set_aside_total"),
            1.0
        );
        assert_eq!(metric(&metrics, "warden_proxy_usage_set_aside_total"), 2.0);
        assert_eq!(app.count_rows("usage_records", &faulty.id).await, 0);

        let (ok, listed) = warden_spool(&app, spool.path(), &["list"]);
        assert!(ok, "{listed}");
        assert!(listed.contains("1 batch(es) set aside"), "{listed}");
        assert!(listed.contains("2 records"), "{listed}");
        // Still failing: the replay says so and keeps the batch.
        let (ok, replayed) = warden_spool(&app, spool.path(), &["replay"]);
        assert!(!ok, "{replayed}");
        assert!(replayed.contains("stay set aside"), "{replayed}");

        mend_ledger(&app, &trigger).await;
        let (ok, replayed) = warden_spool(&app, spool.path(), &["replay"]);
        assert!(ok, "{replayed}");
        assert!(replayed.contains("accepted 2"), "{replayed}");
        assert_eq!(app.count_rows("usage_records", &faulty.id).await, 2);
        let (_, listed) = warden_spool(&app, spool.path(), &["list"]);
        assert!(listed.contains("0 batch(es) set aside"), "{listed}");
        assert_eq!(app.count_rows("usage_records", &other.id).await, 3);
    }
);
