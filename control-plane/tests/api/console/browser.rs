//! The console in headless Chromium (Debian's `chromium`, driven by Playwright for
//! Python from PyPI, installed into `target/playwright` on first use): `browser.py`
//! beside this file signs up, signs in and out, approves a request an agent makes while
//! the page is open, blocks and unblocks an agent, and checks what a read-only person
//! and another site cannot do, scanning every page with axe-core (vendored in
//! `vendor/`) and writing a screenshot of each to `target/console-screenshots/`.

use std::path::Path;

use serde_json::json;

use crate::helpers::{Backend, TestApp};
use crate::proxy::HeldForApproval;
use crate::python::venv_python;

/// The Playwright release the script is written against.
const PLAYWRIGHT: &str = "playwright==1.65.2";

/// Debian's Chromium (`.ci/run` installs it); a test tool's own browser download is not
/// used.
const CHROMIUM: &str = "/usr/bin/chromium";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_works_in_a_real_browser() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "the console's browser tests need Debian's chromium at {CHROMIUM} \
         (apt-get install chromium; .ci/run installs it)"
    );
    let app = TestApp::spawn_with(Backend::Sqlite, |_| {}).await;
    let held = HeldForApproval::start(&app, "release-bot").await;
    let (proxy, tenant, proxy_key, created) = (&held.proxy, &held.tenant, &held.key, &held.created);
    let agent_id = created["agent_id"].as_str().unwrap().to_owned();
    let agent = crate::helpers::expect_status(
        app.get(&format!("/agents/{agent_id}"), &tenant.admin_key)
            .await,
        200,
    )
    .await;
    let xss = app
        .register_agent(
            &tenant.admin_key,
            json!({ "name": "<img src=x onerror=alert(1)>" }),
        )
        .await;
    let reader_key = app
        .key_with_scopes(
            tenant,
            &["registry:read", "governance:read", "monitoring:read"],
        )
        .await;
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = json!({
        "base": app.base,
        "proxy": proxy.base,
        "admin_key": tenant.admin_key,
        "reader_key": reader_key,
        "proxy_key": proxy_key,
        "agent_id": agent_id,
        "agent_name": agent["data"]["name"],
        "xss_agent_id": xss["id"],
        "chromium": CHROMIUM,
        "axe": here.join("tests/api/console/vendor/axe.min.js"),
        "screenshots": here.join("../target/console-screenshots"),
    });
    let script = here.join("tests/api/console/browser.py");
    let output = tokio::task::spawn_blocking(move || {
        let python = venv_python("playwright", &[PLAYWRIGHT]);
        std::process::Command::new(python)
            .arg(script)
            .arg(config.to_string())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{printed}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        printed.contains("all console browser checks passed"),
        "{printed}"
    );
    // What was checked, in the test's output (shown with --nocapture).
    println!("{printed}");
}
