//! Notification channels and delivery, against real receivers: `receiver.py` checks
//! Slack's Block Kit and PagerDuty's Events API v2 rules, verifies Standard Webhooks
//! signatures with the `standardwebhooks` library and runs an aiosmtpd SMTP server.

mod channels;
mod delivery;
mod ssrf;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_control_plane::config::Config;

use crate::helpers::{expect_status, Backend, TestApp, TestTenant};
use crate::servers::ChildOutput;

/// The receiver's Python packages, pinned.
const PACKAGES: &[&str] = &["aiosmtpd==1.4.6", "standardwebhooks==1.1.0"];

/// A PagerDuty integration key has 32 characters.
pub const ROUTING_KEY: &str = "R0UT1NGKEY0123456789abcdefghijkl";

/// The receivers' process on an HTTP and an SMTP port, stopped when dropped. It takes
/// free ports when it first starts and keeps them when it starts again.
pub struct Receiver {
    pub http_port: u16,
    pub smtp_port: u16,
    child: Option<Child>,
    client: reqwest::Client,
    /// The webhook secret, given to the process again when it restarts.
    secret: Option<String>,
    /// The SMTP server that requires STARTTLS, when started with one.
    pub starttls: Option<StartTls>,
}

/// An SMTP port requiring STARTTLS, with a certificate for 127.0.0.1 signed by a test CA
/// whose PEM is in `ca_file`.
pub struct StartTls {
    pub port: u16,
    pub ca_file: std::path::PathBuf,
    cert_file: std::path::PathBuf,
    key_file: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl StartTls {
    fn new() -> StartTls {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let server_key = KeyPair::generate().unwrap();
        let server = CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .unwrap()
            .signed_by(&server_key, &ca, &ca_key)
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (ca_file, cert_file, key_file) = (
            dir.path().join("ca.pem"),
            dir.path().join("smtp.pem"),
            dir.path().join("smtp.key"),
        );
        std::fs::write(&ca_file, ca.pem()).unwrap();
        std::fs::write(&cert_file, server.pem()).unwrap();
        std::fs::write(&key_file, server_key.serialize_pem()).unwrap();
        StartTls {
            port: 0,
            ca_file,
            cert_file,
            key_file,
            _dir: dir,
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Receiver {
    pub async fn start() -> Receiver {
        let mut receiver = Receiver {
            http_port: 0,
            smtp_port: 0,
            child: None,
            client: reqwest::Client::new(),
            secret: None,
            starttls: None,
        };
        receiver.start_again().await;
        receiver
    }

    /// Receivers with, besides, an SMTP server that requires STARTTLS.
    pub async fn start_with_starttls() -> Receiver {
        let mut receiver = Receiver {
            http_port: 0,
            smtp_port: 0,
            child: None,
            client: reqwest::Client::new(),
            secret: None,
            starttls: Some(StartTls::new()),
        };
        receiver.start_again().await;
        receiver
    }

    /// Starts the process (again, on the same ports); what it had received is gone.
    pub async fn start_again(&mut self) {
        let python = tokio::task::spawn_blocking(|| {
            crate::python::venv_python("notify-receivers", PACKAGES)
        })
        .await
        .unwrap();
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/api/notifications/receiver.py"
        );
        let mut command = Command::new(python);
        command.args([
            script,
            &self.http_port.to_string(),
            &self.smtp_port.to_string(),
        ]);
        if let Some(secret) = &self.secret {
            command.args(["--secret", secret]);
        }
        if let Some(tls) = &self.starttls {
            command
                .args(["--starttls", &tls.port.to_string()])
                .args([&tls.cert_file, &tls.key_file]);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the receivers start");
        let output = ChildOutput::capture(&mut child);
        self.child = Some(child);
        // Generous: under the whole suite's load a Python start can take many seconds.
        let ports = output.ports(Duration::from_secs(120)).await;
        self.http_port = ports[0];
        self.smtp_port = ports[1];
        if let Some(tls) = &mut self.starttls {
            tls.port = ports[2];
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http_port)
    }

    /// Tells the webhook receiver the secret to verify with (now and after a restart).
    pub async fn set_secret(&mut self, secret: &str) {
        self.secret = Some(secret.to_owned());
        self.client
            .post(self.url("/_secret"))
            .json(&json!({ "secret": secret }))
            .send()
            .await
            .unwrap();
    }

    async fn try_received(&self) -> Option<Value> {
        let response = self
            .client
            .get(self.url("/received"))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?;
        response.json().await.ok()
    }

    /// Everything received: `{slack, pagerduty, webhook, email, rejected}`.
    pub async fn received(&self) -> Value {
        self.try_received().await.expect("the receivers answer")
    }

    /// Waits until `done` holds for what was received (at most 60 s); returns it.
    pub async fn wait_for(&self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let received = self.received().await;
            assert!(
                received["rejected"].as_array().unwrap().is_empty(),
                "a receiver rejected a message: {}",
                received["rejected"]
            );
            if done(&received) {
                return received;
            }
            assert!(
                Instant::now() < deadline,
                "waited 60 s for {what}: {received}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A control plane whose delivery worker runs every 50 ms, allowed to call receivers on
/// 127.0.0.1, alone on its database (the worker is one per database).
pub async fn notifying_app(backend: Backend, configure: impl FnOnce(&mut Config)) -> TestApp {
    TestApp::spawn_alone(backend, |config| {
        config.notifications.delivery_interval_ms = 50;
        config.notifications.attempt_timeout_secs = 10;
        config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()];
        configure(config);
    })
    .await
}

/// Creates a channel; returns its `data`.
pub async fn create_channel(app: &TestApp, tenant: &TestTenant, body: Value) -> Value {
    expect_status(
        app.post("/notifications/channels", &tenant.admin_key, body)
            .await,
        201,
    )
    .await["data"]
        .clone()
}

/// The four channels, each on its receiver, subscribed to `events`; returns their ids
/// (slack, pagerduty, webhook, email) after giving the webhook receiver its secret.
pub async fn four_channels(
    app: &TestApp,
    tenant: &TestTenant,
    receiver: &mut Receiver,
    events: &[&str],
) -> [String; 4] {
    let slack = create_channel(
        app,
        tenant,
        json!({"name": "ops slack", "channel_type": "slack", "events": events,
               "config": {"webhook_url": receiver.url("/slack")}}),
    )
    .await;
    let pagerduty = create_channel(
        app,
        tenant,
        json!({"name": "on-call", "channel_type": "pagerduty", "events": events,
               "config": {"routing_key": ROUTING_KEY, "events_url": receiver.url("/pagerduty")}}),
    )
    .await;
    let webhook = create_channel(
        app,
        tenant,
        json!({"name": "siem", "channel_type": "webhook", "events": events,
               "config": {"url": receiver.url("/webhook")}}),
    )
    .await;
    receiver
        .set_secret(webhook["signing_secret"].as_str().unwrap())
        .await;
    let email = create_channel(
        app,
        tenant,
        json!({"name": "security team", "channel_type": "email", "events": events,
               "config": {"to": ["secops@example.com", "cto@example.com"],
                          "from": "warden@example.com", "smtp_host": "127.0.0.1",
                          "smtp_port": receiver.smtp_port, "security": "none"}}),
    )
    .await;
    [slack, pagerduty, webhook, email].map(|channel| channel["id"].as_str().unwrap().to_owned())
}

/// The count of each received kind, a message received twice counted once as its
/// receiver would (delivery is at least once: an answer slower than the attempt's time
/// limit is sent again). Slack and PagerDuty messages are told apart by content.
pub fn counts(received: &Value) -> [usize; 4] {
    let distinct = |kind: &str, id: &dyn Fn(&Value) -> String| {
        let items = received[kind].as_array().unwrap();
        items
            .iter()
            .map(id)
            .collect::<std::collections::HashSet<_>>()
            .len()
    };
    [
        distinct("slack", &|m| m.to_string()),
        distinct("pagerduty", &|m| m.to_string()),
        distinct("webhook", &|m| m["id"].to_string()),
        distinct("email", &|m| m["message_id"].to_string()),
    ]
}
