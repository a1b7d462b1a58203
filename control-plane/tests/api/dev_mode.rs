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
    /// What it printed after the welcome text (its log, and its error output).
    later: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// The threads reading its output, done once it has exited.
    readers: Vec<std::thread::JoinHandle<()>>,
}

/// Starts `warden dev` on a free port and reads its welcome text up to "Ctrl-C".
fn start(data_dir: &std::path::Path, envs: &[(&str, &str)]) -> Started {
    let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
    command
        .args(["dev", "--port", "0", "--proxy-port", "0", "--data-dir"])
        .arg(data_dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in envs {
        command.env(key, value);
    }
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
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
    let later = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = later.clone();
    let out = std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    // Its error output too, so a failed stop says why.
    let sink = later.clone();
    let err = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(format!("stderr: {line}"));
        }
    });
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
        later,
        readers: vec![out, err],
    }
}

/// Interrupts it and asserts it stops with success, showing what it printed if not.
fn stop_cleanly(mut started: Started) {
    let later = started.later.clone();
    let readers = std::mem::take(&mut started.readers);
    let status = interrupt_and_wait(started);
    for reader in readers {
        let _ = reader.join();
    }
    assert!(
        status.success(),
        "warden dev stopped with {status}:\n{}",
        later.lock().unwrap().join("\n")
    );
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
    let reference = first
        .output
        .iter()
        .find(|l| l.contains("API reference"))
        .unwrap_or_else(|| panic!("no API reference line in {text}"));
    assert!(reference.contains("/docs"), "{reference}");
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
    // Anthropic's SDKs take the proxy's base without `/v1`.
    let claude_line = first
        .output
        .iter()
        .find(|l| l.contains("Proxy (Claude)"))
        .expect("the Anthropic SDKs' base URL is printed");
    assert_eq!(claude_line.split_whitespace().nth(2), Some(proxy_base));
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
    stop_cleanly(second);
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
    stop_cleanly(started);
}

/// Both planes write one line per request: the management API's route template, status
/// and tenant; the proxy's refusal with its decision. Never a key.
#[test]
fn each_request_leaves_one_log_line_without_secrets() {
    let data = tempfile::tempdir().unwrap();
    let started = start(data.path(), &[("RUST_LOG", "info")]);
    let proxy_line = started
        .output
        .iter()
        .find(|l| l.contains("Proxy (OpenAI)"))
        .expect("the proxy URL is printed")
        .clone();
    let proxy = proxy_line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .trim_end_matches("/v1")
        .to_owned();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let base = started.base.clone();
    let key = runtime.block_on(async move {
        let client = reqwest::Client::new();
        let signup: serde_json::Value = client
            .post(format!("{base}/api/v1/auth/signup"))
            .json(
                &serde_json::json!({ "email": "log@example.com", "password": "a-long-password",
                "company_name": "Logs" }),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let key = signup["data"]["api_key"].as_str().unwrap().to_owned();
        let listed = client
            .get(format!("{base}/api/v1/agents?limit=5"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(listed.status(), 200);
        let refused = client
            .post(format!("{proxy}/v1/chat/completions"))
            .bearer_auth("wdn_not_a_real_key_0123456789abcdef")
            .json(&serde_json::json!({ "model": "gpt-4o-mini", "messages": [] }))
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401);
        key
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let (api_line, proxy_refusal) = loop {
        // Field values may be quoted: compare without the quotes.
        let lines: Vec<String> = started
            .later
            .lock()
            .unwrap()
            .iter()
            .map(|l| l.replace('"', ""))
            .collect();
        let api = lines
            .iter()
            .find(|l| l.contains("route=/api/v1/agents") && l.contains("status=200"))
            .cloned();
        let refused = lines
            .iter()
            .find(|l| l.contains("decision=invalid_api_key"))
            .cloned();
        if let (Some(api), Some(refused)) = (api, refused) {
            break (api, refused);
        }
        assert!(Instant::now() < deadline, "no request lines in: {lines:#?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(api_line.contains("tenant_id=ten_"), "{api_line}");
    assert!(api_line.contains("duration_ms="), "{api_line}");
    assert!(proxy_refusal.contains("status=401"), "{proxy_refusal}");
    let everything = started.later.lock().unwrap().join("\n");
    assert!(!everything.contains(&key), "a key was logged");
    assert!(
        !everything.contains("wdn_not_a_real_key"),
        "a presented key was logged"
    );
    stop_cleanly(started);
}

/// The README's first session, run as it stands as one shell script (no sleeps, no
/// retries) against `warden dev`, with a local mock as the OpenAI provider: every
/// change it makes is in force when its call returns, so each next step sees it.
#[test]
fn the_readme_walkthrough_runs_as_a_script() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let session = readme
        .split("## A first session")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("README has a first session");
    let script: String = session
        .split("```sh\n")
        .skip(1)
        .filter_map(|block| block.split("```").next())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(script.contains("approvals/$APPROVAL/decide"), "{script}");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let provider = runtime.block_on(crate::proxy::MockProvider::start());
    let data = tempfile::tempdir().unwrap();
    let started = start(
        data.path(),
        &[("WARDEN_PROVIDERS__OPENAI__BASE_URL", provider.base.as_str())],
    );
    let printed = |label: &str| -> String {
        let line = started.output.iter().find(|l| l.contains(label)).unwrap();
        line.split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap()
            .trim_end_matches("/api/v1")
            .trim_end_matches("/v1")
            .trim_start_matches("http://")
            .to_owned()
    };
    let (api, proxy) = (printed("Management API"), printed("Proxy (OpenAI)"));
    let platform_key = started
        .output
        .iter()
        .find_map(|l| l.split_whitespace().find(|w| w.starts_with("wdn_")))
        .expect("the platform key is printed")
        .to_owned();
    // Only the addresses and the key printed at start differ from the README.
    let script = script
        .replace("127.0.0.1:8080", &api)
        .replace("127.0.0.1:8081", &proxy)
        .replace("PLATFORM=wdn_...", &format!("PLATFORM={platform_key}"));
    let run = Command::new("bash")
        .args(["-e", "-o", "pipefail", "-c", &script])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout).into_owned();
    let err = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "{out}\n{err}");
    for expected in [
        "\"email\":\"you@example.com\"",   // /auth/me
        "\"code\":\"insufficient_scope\"", // the read-only key cannot write
        "\"code\":\"agent_blocked\"",      // the kill switch, at once
        "\"error\":\"approval_required\"", // held for a human
        "\"object\":\"chat.completion\"",  // approved: forwarded to the provider
        "\"result\":\"fail\"",             // the decisions a policy failed
    ] {
        assert!(out.contains(expected), "missing {expected} in:\n{out}");
    }
    drop(provider);
    stop_cleanly(started);
}
