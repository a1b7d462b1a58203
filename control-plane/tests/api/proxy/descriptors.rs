//! `warden proxy` out of file descriptors: more agents connect than its limit lets it
//! accept. It must neither spin on the failing `accept` nor write a log line per
//! attempt; it counts the failures in its metrics and serves again once connections
//! close.
//! Before the fix, 60 idle connections over the limit took a core and wrote about
//! 650,000 log lines a second.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::helpers::SERVICE_TOKEN;
use crate::servers::{logged_port, ChildOutput};

/// The proxy's descriptor limit: enough to start, well under the connections below.
const DESCRIPTOR_LIMIT: u32 = 64;
const CONNECTIONS: usize = 150;

#[test]
fn a_proxy_out_of_descriptors_pauses_accepting_and_logs_once() {
    // `ulimit` in a shell that then becomes the proxy: no unsafe `pre_exec` needed.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {DESCRIPTOR_LIMIT} && exec \"$0\" proxy",))
        .arg(env!("CARGO_BIN_EXE_warden"))
        .env("WARDEN_PROXY__LISTEN", "127.0.0.1:0")
        // Nothing listens there: the proxy serves (refusing unknown keys) and retries.
        .env("WARDEN_PROXY__CONTROL_PLANE_URL", "http://127.0.0.1:9")
        .env("WARDEN_SERVICE_TOKEN", SERVICE_TOKEN)
        // Warnings, and the line that says where it listens.
        .env("RUST_LOG", "warn,warden=info")
        // The log goes to stdout.
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let log = ChildOutput::capture(&mut child);
    let port = logged_port(&log.line_with_blocking("proxy listening", Duration::from_secs(60)));
    wait_for_health(port);

    let pid = child.id();
    let held: Vec<TcpStream> = (0..CONNECTIONS)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let cpu_before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_millis(1500));
    let cpu = cpu_ticks(pid) - cpu_before;
    let failures: Vec<String> = log
        .lines()
        .into_iter()
        .filter(|line| line.contains("accept failed"))
        .collect();
    assert!(
        !failures.is_empty(),
        "the limit was reached (else this test proves nothing)"
    );
    assert!(
        failures.len() <= 2,
        "one line per interval, not per attempt: {} lines",
        failures.len()
    );
    assert!(
        failures[0].contains("Too many open files"),
        "{}",
        failures[0]
    );
    // A spinning acceptor burns a core: about 150 ticks in 1.5 s.
    assert!(
        cpu < 50,
        "{cpu} ticks of CPU in 1.5 s while holding connections"
    );

    drop(held);
    wait_for_health(port);
    // One failed accept per pause, not one per spin of the loop.
    let failed = accept_failures(port);
    assert!(
        (1..=100).contains(&failed),
        "{failed} failed accepts counted"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Waits until the proxy answers `/healthz` on a connection of its own (one it
/// accepted: the kernel completes a connection the proxy has not taken yet).
fn wait_for_health(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !answers_health(port) {
        assert!(Instant::now() < deadline, "the proxy never answered");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `warden_proxy_accept_failures_total` from the proxy's `/metrics`.
fn accept_failures(port: u16) -> u64 {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).unwrap();
    answer
        .lines()
        .find_map(|line| line.strip_prefix("warden_proxy_accept_failures_total "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no accept failure count in {answer}"))
}

fn answers_health(port: u16) -> bool {
    let Ok(mut tcp) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(1)));
    let request = b"GET /healthz HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n";
    let mut head = [0u8; 12];
    tcp.write_all(request).is_ok()
        && tcp.read_exact(&mut head).is_ok()
        && head.starts_with(b"HTTP/1.1 ")
}

/// User and system CPU time of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}
