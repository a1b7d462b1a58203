//! Servers the tests start in processes of their own (Python receivers, moto, an MCP
//! server, `warden proxy`): they listen on port 0 and announce the port they got, which
//! [`ChildOutput`] reads back; and [`RefusingPort`], a port nothing answers on.

use serde_json::Value;

/// A port on 127.0.0.1 where connections are refused for as long as this value lives: a
/// socket bound to it but not listening holds it, so no other process can take it.
pub struct RefusingPort {
    _socket: tokio::net::TcpSocket,
    pub port: u16,
}

impl RefusingPort {
    pub fn new() -> RefusingPort {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket
            .bind(([127, 0, 0, 1], 0).into())
            .expect("a port to hold");
        let port = socket.local_addr().expect("its address").port();
        RefusingPort {
            _socket: socket,
            port,
        }
    }
}

/// The port in a log line's `addr` field (`HOST:PORT`), such as `warden proxy`'s "proxy
/// listening" when it was told to listen on port 0; the line is JSON (the log format
/// when the output is not a terminal) or text (`addr=HOST:PORT`).
pub fn logged_port(line: &str) -> u16 {
    let addr = match serde_json::from_str::<Value>(line) {
        Ok(json) => json["fields"]["addr"].as_str().map(str::to_owned),
        Err(_) => line
            .split_whitespace()
            .find_map(|field| field.strip_prefix("addr="))
            .map(str::to_owned),
    };
    addr.as_deref()
        .and_then(|addr| addr.rsplit(':').next())
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no addr HOST:PORT in {line:?}"))
}

/// A child process's standard output, read line by line on a thread of its own (the
/// child never blocks on a full pipe) and kept for the test to search. Servers started
/// by tests listen on port 0 and print the port they got: the port comes from the
/// listener that holds it.
pub struct ChildOutput {
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// Set when the child's output ends (it exited).
    ended: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl ChildOutput {
    /// Takes over `child`'s piped standard output.
    pub fn capture(child: &mut std::process::Child) -> ChildOutput {
        use std::io::BufRead;
        let stdout = child.stdout.take().expect("the child's stdout is piped");
        let output = ChildOutput {
            lines: Default::default(),
            ended: Default::default(),
        };
        let (lines, ended) = (output.lines.clone(), output.ended.clone());
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                lines.lock().expect("the lines").push(line);
            }
            ended.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        output
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("the lines").clone()
    }

    /// The first line containing `marker`, waited for up to `within`; panics with what
    /// the child printed if it exits or the time runs out first.
    pub async fn line_with(&self, marker: &str, within: std::time::Duration) -> String {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(line) = self.found(marker, deadline) {
                return line;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// [`ChildOutput::line_with`] for a test without a runtime.
    pub fn line_with_blocking(&self, marker: &str, within: std::time::Duration) -> String {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(line) = self.found(marker, deadline) {
                return line;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    fn found(&self, marker: &str, deadline: std::time::Instant) -> Option<String> {
        let lines = self.lines();
        if let Some(line) = lines.iter().find(|line| line.contains(marker)) {
            return Some(line.clone());
        }
        let ended = self.ended.load(std::sync::atomic::Ordering::SeqCst);
        assert!(
            !ended && std::time::Instant::now() < deadline,
            "no line with {marker:?} ({}): {lines:?}",
            if ended {
                "the child exited"
            } else {
                "timed out"
            },
        );
        None
    }

    /// The ports a server announces on a line `listening on ports P1 P2 ...` (or `port P`).
    pub async fn ports(&self, within: std::time::Duration) -> Vec<u16> {
        let line = self.line_with("listening on port", within).await;
        line.split_whitespace()
            .filter_map(|word| word.parse().ok())
            .collect()
    }
}
