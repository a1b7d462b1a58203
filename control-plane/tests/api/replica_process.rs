//! A `warden control-plane` process of its own, for the tests that kill one (`kill -9`):
//! the binary the image runs, on a free port, with the settings the test gives.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::helpers::SERVICE_TOKEN;
use crate::proxy::eventually;

pub struct ControlPlaneProcess {
    child: Child,
    pub addr: SocketAddr,
}

impl ControlPlaneProcess {
    /// Starts one on `database_url` with `envs` (WARDEN_ variables) besides its address
    /// and the tests' service token.
    pub fn start(database_url: &str, envs: &[(&str, &str)]) -> ControlPlaneProcess {
        let addr: SocketAddr = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap()
        };
        let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
        command
            .arg("control-plane")
            .env("WARDEN_DATABASE_URL", database_url)
            .env("WARDEN_LISTEN", addr.to_string())
            .env("WARDEN_SERVICE_TOKEN", SERVICE_TOKEN)
            .env("WARDEN_LOG_LEVEL", "error")
            .stdout(Stdio::null());
        for (name, value) in envs {
            command.env(name, value);
        }
        ControlPlaneProcess {
            child: command.spawn().unwrap(),
            addr,
        }
    }

    /// Waits until its `/readyz` answers 2xx.
    pub async fn wait_ready(&self) {
        let url = format!("http://{}/readyz", self.addr);
        eventually(Duration::from_secs(60), || async {
            let answer = reqwest::get(&url).await.ok()?;
            answer.status().is_success().then_some(())
        })
        .await;
    }

    /// Kills it as `kill -9` does: no shutdown, leases and streams left to lapse.
    pub fn kill_9(&mut self) {
        Command::new("kill")
            .args(["-9", &self.child.id().to_string()])
            .status()
            .unwrap();
        let _ = self.child.wait();
    }
}

impl Drop for ControlPlaneProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
