//! A real local AWS Secrets Manager for the managed-key tests: moto's server, from PyPI.
//!
//! On first use it is installed into a Python virtual environment under the workspace's
//! `target/moto` (`crate::python`); set
//! `WARDEN_TEST_MOTO_PYTHON` to a Python that has moto installed to skip that. Each test
//! starts its own server (moto's `ThreadedMotoServer`) on a free port and stops it
//! when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::servers::ChildOutput;

/// The moto release the tests are written against.
const MOTO: &str = "moto[server]==5.2.5";

/// moto's server on port 0, announcing the port its listener got.
const SERVE_ON_ANY_PORT: &str = "\
import threading
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer('127.0.0.1', 0, verbose=False)
server.start()
print('listening on port', server.get_host_and_port()[1], flush=True)
threading.Event().wait()
";

pub struct Moto {
    pub endpoint: String,
    client: reqwest::Client,
    child: Child,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Moto {
    /// A server on a free port, read back from its listener once it is up.
    pub async fn start() -> Moto {
        let python = tokio::task::spawn_blocking(moto_python)
            .await
            .expect("installing moto");
        let mut child = Command::new(&python)
            .args(["-c", SERVE_ON_ANY_PORT])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {}: {error}", python.display()));
        let output = ChildOutput::capture(&mut child);
        let port = output.ports(Duration::from_secs(60)).await[0];
        Moto {
            endpoint: format!("http://127.0.0.1:{port}"),
            client: reqwest::Client::new(),
            child,
        }
    }

    pub async fn create_secret(&self, name: &str, value: &str) {
        self.call(
            "CreateSecret",
            json!({ "Name": name, "SecretString": value }),
        )
        .await
        .expect("CreateSecret");
    }

    /// Stores a new current version of the secret, as a rotation does.
    pub async fn put_secret_value(&self, name: &str, value: &str) {
        self.call(
            "PutSecretValue",
            json!({ "SecretId": name, "SecretString": value }),
        )
        .await
        .expect("PutSecretValue");
    }

    /// One Secrets Manager API call in its JSON protocol (moto does not check signatures).
    async fn call(&self, action: &str, body: Value) -> Result<Value, String> {
        let response = self
            .client
            .post(&self.endpoint)
            .header("x-amz-target", format!("secretsmanager.{action}"))
            .header("content-type", "application/x-amz-json-1.1")
            .header(
                "authorization",
                "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/secretsmanager/aws4_request",
            )
            .body(body.to_string())
            .send()
            .await
            .map_err(|error| error.to_string())?;
        let status = response.status();
        let text = response.text().await.map_err(|error| error.to_string())?;
        if !status.is_success() {
            return Err(format!("{action}: {status}: {text}"));
        }
        serde_json::from_str(&text).map_err(|error| error.to_string())
    }
}

/// A Python with moto installed, installed on first use.
fn moto_python() -> PathBuf {
    #[allow(clippy::disallowed_methods)] // Test settings are not the service's configuration.
    if let Ok(path) = std::env::var("WARDEN_TEST_MOTO_PYTHON") {
        return PathBuf::from(path);
    }
    crate::python::venv_python("moto", &[MOTO])
}
