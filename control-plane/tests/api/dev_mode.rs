//! `warden dev` as a newcomer runs it: prints the URLs and the bootstrap key once, serves,
//! and stops cleanly on Ctrl-C (SIGINT).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::helpers::{expect_error, expect_status};

struct Started {
    child: Child,
    output: Vec<String>,
    base: String,
}

/// Starts `warden dev` on a free port and reads its welcome text up to "Ctrl-C".
fn start(data_dir: &std::path::Path, envs: &[(&str, &str)]) -> Started {
    let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
    command
        .args(["dev", "--port", "0", "--proxy-port", "0", "--data-dir"])
        .arg(data_dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (key, value) in envs {
        command.env(key, value);
    }
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut output = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else { break };
        let done = line.contains("Ctrl-C");
        output.push(line);
        if done {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let api_line = output
        .iter()
        .find(|l| l.contains("Management API"))
        .expect("the API URL is printed");
    let url = api_line.split_whitespace().last().unwrap();
    let base = url.trim_end_matches("/api/v1").to_owned();
    Started {
        child,
        output,
        base,
    }
}

fn interrupt_and_wait(mut started: Started) -> std::process::ExitStatus {
    let pid = started.child.id().to_string();
    Command::new("kill").args(["-INT", &pid]).status().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = started.child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "warden dev did not stop on SIGINT"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test]
async fn warden_dev_prints_what_a_newcomer_needs_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let first = start(dir.path(), &[]);
    let text = first.output.join("\n");
    assert!(text.contains("/api/v1/openapi.json"), "{text}");
    let key_line_index = first
        .output
        .iter()
        .position(|l| l.contains("Platform-admin key (shown once"))
        .unwrap();
    let key = first.output[key_line_index + 1].trim().to_owned();
    assert!(key.starts_with("wdn_"), "{text}");
    assert!(
        dir.path().join("warden.db").exists(),
        "SQLite lives in the data folder"
    );

    let client = reqwest::Client::new();
    let tenants = client
        .get(format!("{}/api/v1/admin/tenants", first.base))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    expect_status(tenants, 200).await;

    // The proxy runs beside it and has loaded its state from the control plane.
    let proxy_line = first
        .output
        .iter()
        .find(|l| l.contains("Proxy (OpenAI)"))
        .expect("the proxy URL is printed");
    let proxy_v1 = proxy_line.split_whitespace().nth(2).unwrap();
    assert!(proxy_v1.ends_with("/v1"), "{proxy_line}");
    let proxy_base = proxy_v1.trim_end_matches("/v1");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let health: serde_json::Value = client
            .get(format!("{proxy_base}/healthz"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if health["status"] == "ok" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the proxy never loaded: {health}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let unauthenticated = client
        .get(format!("{proxy_base}/v1/models"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status().as_u16(), 401);
    assert!(
        interrupt_and_wait(first).success(),
        "Ctrl-C stops it with success"
    );

    // The second start keeps the data and does not print (or replace) the key.
    let second = start(dir.path(), &[]);
    let text = second.output.join("\n");
    assert!(
        !text.contains("wdn_"),
        "the key is printed only once: {text}"
    );
    let again = client
        .get(format!("{}/api/v1/admin/tenants", second.base))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    expect_status(again, 200).await;
    assert!(interrupt_and_wait(second).success());
}

#[tokio::test]
async fn a_configured_bootstrap_key_is_used_and_a_bad_one_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bad = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["dev", "--port", "0", "--proxy-port", "0", "--data-dir"])
        .arg(dir.path())
        .env(
            "WARDEN_BOOTSTRAP_PLATFORM_KEY",
            "not-branded-0123456789abcdefghij",
        )
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("WARDEN_BOOTSTRAP_PLATFORM_KEY"));

    let key = "wdn_configured_0123456789abcdefghijklmn";
    let started = start(dir.path(), &[("WARDEN_BOOTSTRAP_PLATFORM_KEY", key)]);
    assert!(
        !started.output.join("\n").contains(key),
        "a configured key is not echoed"
    );
    let client = reqwest::Client::new();
    let response = client
        .get(format!("{}/api/v1/admin/tenants", started.base))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    expect_status(response, 200).await;
    let response = client
        .get(format!("{}/api/v1/agents", started.base))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    expect_error(response, 403, "insufficient_scope").await;
    assert!(interrupt_and_wait(started).success());
}
